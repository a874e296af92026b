"""Losses shared by the stages (and later by RL): masked next-token loss, Bradley-Terry."""
from __future__ import annotations


def causal_lm_loss(model, ids, attention_mask=None, loss_mask=None, tokens: float | None = None):
    """Mean next-token cross-entropy over positions where `loss_mask` (aligned with `ids`) is 1;
    every position when `loss_mask` is None (packed pretraining blocks).

    With data parallelism and a loss mask, pass `tokens` = loss tokens of the whole global batch
    divided by the world size: each rank's loss is then its share of the global mean, and the
    gradients DDP averages equal those of one process on the whole batch.
    """
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=attention_mask).logits[:, :-1]
    target = ids[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction="none")
    if loss_mask is None:
        return nll.mean()
    weight = loss_mask[:, 1:].reshape(-1).to(nll.dtype)
    return (nll * weight).sum() / (tokens if tokens else weight.sum().clamp(min=1.0))


def bradley_terry_loss(chosen_rewards, rejected_rewards):
    """-log sigmoid(r_chosen - r_rejected), averaged; and the share of pairs ranked right."""
    import torch.nn.functional as F

    margin = chosen_rewards - rejected_rewards
    return -F.logsigmoid(margin).mean(), (margin > 0).float().mean()


# ---- RL: shared by the GRPO and DPO paths of the rl stage ---------------------------------------

def token_logps(model, ids, attention_mask, temperature: float = 1.0):
    """log p(ids[:, t] | ids[:, :t]) for t >= 1: a (batch, tokens - 1) tensor, aligned with ids[:, 1:].

    Under the sampling temperature (logits / T): the distribution the rollouts were drawn from, so
    that the policy gradient and the KL are about the policy that actually acted. Float32; padding
    goes on the right (positions past a row's end are masked out by the caller)."""
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    return F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def packed_token_logps(model, packed: dict, temperature: float = 1.0):
    """`token_logps` on `policy.pack_shared`'s rows (each group's prompt once): (samples, longest
    response), log p of each response token under the temperature, 0 where `packed["valid"]` is 0.
    The same numbers as `token_logps` on the plain rows, to float rounding (tests/stages/test_rl_packing.py)."""
    import torch.nn.functional as F

    mask = packed["mask"].to(next(model.parameters()).dtype)
    logits = model(input_ids=packed["ids"], position_ids=packed["position_ids"], attention_mask=mask).logits
    picked = logits.reshape(-1, logits.size(-1))[packed["source"].reshape(-1)].float() / temperature
    logp = F.log_softmax(picked, dim=-1).gather(-1, packed["target"].reshape(-1, 1)).view(packed["target"].shape)
    return logp * packed["valid"]


def group_advantages(rewards, group_size: int, normalize: bool = True, eps: float = 1e-6,
                     leave_one_out: bool = True):
    """GRPO advantages: each sample's reward minus the mean of the *other* samples of its prompt's
    group (leave-one-out baseline; the whole group's mean with `leave_one_out=False`), optionally
    divided by the group's standard deviation.

    `rewards` is flat, prompt-major: [p0 s0, p0 s1, …, p1 s0, …].
    """
    r = rewards.view(-1, group_size)
    if leave_one_out:
        baseline = (r.sum(-1, keepdim=True) - r) / (group_size - 1)
    else:
        baseline = r.mean(-1, keepdim=True)
    adv = r - baseline
    if normalize:
        adv = adv / (r.std(-1, keepdim=True) + eps)
    return adv.reshape(-1)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimator of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return d.exp() - d - 1


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_low: float = 0.2, clip_high: float = 0.28,
              kl_coef: float = 0.01):
    """Clipped policy-gradient loss with separate low/high clip (clip-higher), k3 KL to a frozen
    reference, averaged over all response tokens of the batch (token-level, so long answers count
    per token, not per sequence). Tensors are (batch, tokens); `advantages` is (batch,)."""
    import torch

    ratio = (logp - old_logp).exp()
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped) + kl_coef * k3_kl(logp, ref_logp)
    m = mask.float()
    return (per_token * m).sum() / m.sum().clamp(min=1.0)


def dpo_loss(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, beta: float = 0.05,
             sft_weight: float = 0.0, chosen_nll=None):
    """DPO: -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), averaged over pairs; plus
    `sft_weight` * NLL of the chosen responses when given (guards against likelihood collapse)."""
    import torch.nn.functional as F

    margin = (chosen_logp - ref_chosen_logp) - (rejected_logp - ref_rejected_logp)
    loss = -F.logsigmoid(beta * margin).mean()
    if sft_weight and chosen_nll is not None:
        loss = loss + sft_weight * chosen_nll.mean()
    return loss
