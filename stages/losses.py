"""Losses shared by the stages (and later by RL): masked next-token loss, Bradley-Terry."""
from __future__ import annotations


def causal_lm_loss(model, ids, attention_mask, loss_mask, tokens: float | None = None):
    """Mean next-token cross-entropy over positions where `loss_mask` (aligned with `ids`) is 1.

    With data parallelism, pass `tokens` = loss tokens of the whole global batch divided by the
    world size: each rank's loss is then its share of the global mean, and the gradients DDP
    averages equal those of one process on the whole batch.
    """
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=attention_mask).logits[:, :-1]
    target = ids[:, 1:]
    weight = loss_mask[:, 1:].float()
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction="none")
    return (nll * weight.reshape(-1)).sum() / (tokens if tokens else weight.sum().clamp(min=1.0))


def bradley_terry_loss(chosen_rewards, rejected_rewards):
    """-log sigmoid(r_chosen - r_rejected), averaged; and the share of pairs ranked right."""
    import torch.nn.functional as F

    margin = chosen_rewards - rejected_rewards
    return -F.logsigmoid(margin).mean(), (margin > 0).float().mean()
