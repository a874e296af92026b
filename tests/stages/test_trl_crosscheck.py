"""Our GRPO and DPO losses against TRL's trainers on the same model and batch.

TRL computes its side through its own code paths: a GRPOTrainer / DPOTrainer is built on a tiny
Llama saved to disk, and its `compute_loss` scores the batch with its fused LM head. Our side scores
the same token ids with `stages.ml.losses.token_logps` (plain logits) and calls our losses. Both are
backpropagated into the same parameters and the gradients compared.

Conventions that differ, and how the test lines them up:
- Advantages: TRL normalises (r - mean) / (std + eps) over the group; we use a leave-one-out baseline
  (`group_advantages`). The loss is compared given identical advantages, fed to both.
- Normalisation: ours is a token-level mean over all response tokens of the batch, which is TRL's
  `loss_type="bnpo"` (one micro-batch, no gradient accumulation).
- KL: TRL 1.16 by default multiplies the k3 term by the importance ratio (`use_bias_correction_kl`);
  ours does not, so the test turns that off. Even on-policy (ratio 1) the gradients differ with it on:
  d(ratio * kl) carries an extra kl * d log p term.
- Old and reference log-probs are fixed tensors given to both sides (perturbed away from the policy so
  the clip and the k3 KL are active), as the rl stage gets them from generation and a frozen reference.
- DPO's SFT term: TRL's `"sft"` loss is a token-level mean NLL over the chosen completions, so ours
  gets `chosen_nll` as the flat per-token NLLs of those tokens. (stages/ml/policy.py passes each chosen
  response's mean NLL instead, a per-sequence mean: the same number only when lengths are equal.)
"""
import pytest
import torch
import trl  # noqa: F401  (the dev extra installs it; without it these checks must fail, not vanish)

from stages.ml import lm
from stages.data import _train_tokenizer
from stages.ml.losses import dpo_loss, grpo_loss, token_logps

TOL = 1e-5
CLIP_LOW, CLIP_HIGH, KL_COEF, DPO_BETA, SFT_WEIGHT = 0.2, 0.28, 0.05, 0.1, 0.5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random tiny Llama and the character tokenizer, in one HF folder (TRL loads its reference from it)."""
    root = tmp_path_factory.mktemp("trl crosscheck")
    corpus = root / "corpus.txt"
    corpus.write_text("".join(f"{a}+{b}={a + b}\n" for a in range(20) for b in range(20)))
    tokenizer = lm.load_tokenizer(_train_tokenizer(root / "tok", corpus))
    torch.manual_seed(0)
    model = lm.build_model({"hidden": 64, "intermediate": 128, "layers": 2, "heads": 2, "max_len": 32}, tokenizer)
    return lm.save_model(model, tokenizer, root / "model")


def _common_args(cls, out, **kw):
    return cls(output_dir=str(out), use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
               per_device_train_batch_size=4, seed=0, **kw)


def _grads(model) -> list[torch.Tensor]:
    out = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out


def _max_grad_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    assert len(a) == len(b) > 0
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def _grpo_batch(tokenizer):
    """Left-padded prompts, right-padded completions of different lengths (one ends before the others)."""
    prompts = lm.encode(tokenizer, ["12+7=", "3+4=", "12+7=", "15+15="], bos=True)
    completions = lm.encode(tokenizer, ["19", "7", "91", "3"], bos=False, eos=True)
    completions[3] = completions[3][:1]                           # truncated: no eos
    prompt_ids, prompt_mask = lm.pad(prompts, tokenizer.pad_token_id, left=True)
    completion_ids, completion_mask = lm.pad(completions, tokenizer.pad_token_id)
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def test_grpo_loss_and_gradients_match_trl(model_dir, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = _common_args(GRPOConfig, tmp_path, num_generations=2, max_completion_length=4, temperature=1.0,
                        loss_type="bnpo", epsilon=CLIP_LOW, epsilon_high=CLIP_HIGH, beta=KL_COEF, use_vllm=False,
                        use_bias_correction_kl=False)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=lambda completions, **_: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_list([{"prompt": "1+2="}] * 4))
    model, tokenizer = trainer.model, trainer.processing_class
    prompt_ids, prompt_mask, completion_ids, completion_mask = _grpo_batch(tokenizer)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    n = completion_ids.size(1)

    with torch.no_grad():
        logp_now = token_logps(model, ids, attention)[:, -n:]
    g = torch.Generator().manual_seed(1)
    old = logp_now + 0.4 * torch.randn(logp_now.shape, generator=g)   # ratios on both sides of both clips
    ref = logp_now + 0.3 * torch.randn(logp_now.shape, generator=g)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.7])
    ratio = (logp_now - old).exp()[completion_mask.bool()]
    assert (ratio > 1 + CLIP_HIGH).any() and (ratio < 1 - CLIP_LOW).any()

    model.train()
    trainer.current_gradient_accumulation_steps = 1        # what Trainer's loop sets; one micro-batch per step
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages, "old_per_token_logps": old,
              "ref_per_token_logps": ref, "num_items_in_batch": completion_mask.sum()}
    theirs = trainer.compute_loss(model, inputs)
    theirs.backward()
    their_grads = _grads(model)

    logp = token_logps(model, ids, attention)[:, -n:]
    ours = grpo_loss(logp, old, ref, advantages, completion_mask, clip_low=CLIP_LOW, clip_high=CLIP_HIGH,
                     kl_coef=KL_COEF)
    ours.backward()
    our_grads = _grads(model)

    assert abs(ours.item() - theirs.item()) < TOL, (ours.item(), theirs.item())
    assert _max_grad_diff(our_grads, their_grads) < TOL


def test_dpo_loss_and_gradients_match_trl(model_dir, tmp_path):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    pairs = [{"prompt": "23+45=", "chosen": "68", "rejected": "69"},
             {"prompt": "7+8=", "chosen": "15", "rejected": "51"},
             {"prompt": "90+9=", "chosen": "99", "rejected": "100"},
             {"prompt": "5+5=", "chosen": "10", "rejected": "0"}]
    args = _common_args(DPOConfig, tmp_path, beta=DPO_BETA, loss_type=["sigmoid", "sft"],
                        loss_weights=[1.0, SFT_WEIGHT], precompute_ref_log_probs=False)
    trainer = DPOTrainer(model=str(model_dir), args=args, train_dataset=Dataset.from_list(pairs))
    model, ref_model = trainer.model, trainer.ref_model
    with torch.no_grad():                                  # move the policy off the reference: a nonzero margin
        g = torch.Generator().manual_seed(2)
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].size(0) == 2 * len(pairs)     # [chosen..., rejected...]

    model.train()
    theirs = trainer.compute_loss(model, batch)
    theirs.backward()
    their_grads = _grads(model)

    ids, attention = batch["input_ids"], batch["attention_mask"]
    scored = batch["completion_mask"][:, 1:].float()
    logp = token_logps(model, ids, attention) * scored
    with torch.no_grad():
        ref_logp = token_logps(ref_model, ids, attention) * scored
    chosen, rejected = logp.sum(1).chunk(2)
    ref_chosen, ref_rejected = ref_logp.sum(1).chunk(2)
    chosen_nll = -logp[: len(pairs)][scored[: len(pairs)].bool()]
    ours = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=DPO_BETA, sft_weight=SFT_WEIGHT,
                    chosen_nll=chosen_nll)
    ours.backward()
    our_grads = _grads(model)

    assert abs(ours.item() - theirs.item()) < TOL, (ours.item(), theirs.item())
    assert _max_grad_diff(our_grads, their_grads) < TOL
