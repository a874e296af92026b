"""Reward model: Bradley-Terry on preference pairs, a scalar head on the SFT model.

Inputs:  model (model: the SFT causal LM folder)
         data  (pref-data: train.jsonl of {"prompt", "chosen", "rejected"})
Outputs: reward_model (reward-model: the fine-tuned LM in HF format + reward_head.safetensors;
                       `load_reward_model(folder)` gives the scorer a later stage (RL) uses)
Launch:  jobs submit tiny --stage rm [rm.steps=600 rm.loglik=false]
Backend: `rm.backend: torch` trains here on CPU; `nemo_rl` (nano3) runs NeMo RL's run_rm.py in its
         container (stages/nemo_rl.py).

    reward(prompt, response) = head(h_last) [+ alpha * log p(response <eos> | prompt)]

The head reads the last layer's hidden state at the final <eos>. With `rm.loglik: true` the
response log-likelihood under the (trained) LM is added with a learned weight alpha (starting at 1,
the head at 0): training starts from what the SFT model already knows and Bradley-Terry adjusts
all of it. The last `rm.held_out` share of pairs is never trained on; preference accuracy is
reported on it, for the trained reward and, as references, for the SFT model's log-likelihood
alone (the untrained starting point) and the trained head alone.
"""
from __future__ import annotations

from pathlib import Path

from stages import batches, formats, lm, tracking
from stages.loop import Schedule, train
from stages.losses import bradley_terry_loss

HEAD_FILE = "reward_head.safetensors"


def reward_model_class():
    import torch
    import torch.nn.functional as F

    class RewardModel(torch.nn.Module):
        def __init__(self, causal_lm, loglik: bool):
            super().__init__()
            self.lm = causal_lm
            self.head = torch.nn.Linear(causal_lm.config.hidden_size, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)
            self.alpha = torch.nn.Parameter(torch.ones(()), requires_grad=loglik)
            self.loglik = loglik

        def parts(self, ids, attention_mask, response_mask):
            """(head term, response log-likelihood), each (batch,)."""
            out = self.lm(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True)
            logp = F.log_softmax(out.logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loglik = (logp * response_mask[:, 1:]).sum(-1)
            last = attention_mask.sum(-1) - 1
            h = out.hidden_states[-1][torch.arange(ids.size(0)), last]
            return self.head(h).squeeze(-1), loglik

        def forward(self, ids, attention_mask, response_mask):
            head, loglik = self.parts(ids, attention_mask, response_mask)
            return head + self.alpha * loglik if self.loglik else head

    return RewardModel


def encode(tokenizer, prompts: list[str], responses: list[str]):
    """Rows <bos> prompt response <eos>, and masks that are 1 on response and <eos>."""
    p = lm.encode(tokenizer, prompts, bos=True)
    r = lm.encode(tokenizer, responses, bos=False, eos=True)
    return [a + b for a, b in zip(p, r)], [[0] * len(a) + [1] * len(b) for a, b in zip(p, r)]


def _batch(tokenizer, rows, masks):
    ids, attn = lm.pad(rows, tokenizer.pad_token_id)
    resp, _ = lm.pad(masks, 0)
    return ids, attn, resp


def score(model, tokenizer, rows: list[list[int]], masks: list[list[int]]):
    """Rewards of (rows, masks) as encode() makes them."""
    return model(*_batch(tokenizer, rows, masks))


def load_reward_model(path: Path):
    """The reward model a later stage (RL) scores with, in eval mode."""
    from safetensors.torch import load_file

    state = load_file(str(path / HEAD_FILE))
    model = reward_model_class()(lm.load_model(path), loglik=bool(state["loglik"].item()))
    model.head.load_state_dict({"weight": state["head.weight"], "bias": state["head.bias"]})
    model.alpha.data.copy_(state["alpha"])
    return model.eval()


def held_out_accuracy(model, tokenizer, pairs: list[dict]) -> dict[str, float]:
    """Share of pairs where chosen outscores rejected: the reward, its head alone, its log-likelihood alone."""
    import torch

    prompts = [p["prompt"] for p in pairs]
    with torch.no_grad():
        hc, lc = model.parts(*_batch(tokenizer, *encode(tokenizer, prompts, [p["chosen"] for p in pairs])))
        hr, lr = model.parts(*_batch(tokenizer, *encode(tokenizer, prompts, [p["rejected"] for p in pairs])))
    full = (hc + model.alpha * lc, hr + model.alpha * lr) if model.loglik else (hc, hr)
    acc = lambda c, r: (c > r).float().mean().item()  # noqa: E731
    return {"accuracy": acc(*full), "head_only_accuracy": acc(hc, hr), "loglik_only_accuracy": acc(lc, lr)}


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `rm:` section before submit; `backend: nemo_rl` renders NeMo RL's
    reward-model config and checks it against the image's NeMo RL (stages/nemo_rl.py)."""
    cfg = config.get("rm")
    if not isinstance(cfg, dict):
        return ["the config has no rm: section"]
    backend = cfg.get("backend", "torch")
    if backend == "nemo_rl":
        from stages import nemo_rl

        return nemo_rl.check_config(config, "rm", resources)
    if backend != "torch":
        return [f"rm.backend must be torch or nemo_rl (got {backend!r})"]
    from stages.schema import Float, Int, Map, check

    return check(cfg, Map({"held_out": Float(0, 1, open_lo=True, open_hi=True), "batch_size": Int(1, 1 << 20),
                           "steps": Int(1, 10**9), "lr": Float(0, 1, open_lo=True)}, extra=True), "rm")


def preview(config: dict, resources: dict) -> str | None:
    """For `jobs submit --dry-run`: the NeMo RL reward-model config and command a nemo_rl job runs."""
    if config["rm"].get("backend") != "nemo_rl":
        return None
    from stages import nemo_rl

    return nemo_rl.preview(config, resources, "rm")


def run(ctx) -> dict[str, Path]:
    from safetensors.torch import save_file
    import torch

    cfg = ctx.config["rm"]
    if cfg.get("backend", "torch") == "nemo_rl":
        from stages import nemo_rl

        return nemo_rl.run_stage(ctx, "rm")
    # Fail fast.
    problems = []
    if not 0 < cfg["held_out"] < 1:
        problems.append(f"rm.held_out must be in (0, 1) (got {cfg['held_out']})")
    if cfg.get("batch_size", 0) % ctx.dist.world_size:
        problems.append(f"rm.batch_size {cfg.get('batch_size')} does not split over {ctx.dist.world_size} ranks")
    if problems:
        raise ValueError("rm: " + "; ".join(problems))
    schedule = Schedule.from_config(cfg)
    seed = ctx.config["seed"]
    lm.setup_torch(seed, ctx.dist)

    # Setup: SFT model + zero head; pairs split into train and a held-out tail.
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    model = reward_model_class()(lm.load_model(ctx.input("model")), loglik=bool(cfg.get("loglik", True)))
    pairs = formats.preference_pairs(ctx.input("data"))
    cut = int(len(pairs) * (1 - cfg["held_out"]))
    train_pairs, test_pairs = pairs[:cut], pairs[cut:]
    prompts = [p["prompt"] for p in train_pairs]
    chosen = encode(tokenizer, prompts, [p["chosen"] for p in train_pairs])
    rejected = encode(tokenizer, prompts, [p["rejected"] for p in train_pairs])

    def loss_fn(m, step, rank, world):
        picked = batches.indices(seed, step, len(train_pairs), cfg["batch_size"], rank, world)
        rows = [chosen[0][i] for i in picked] + [rejected[0][i] for i in picked]
        masks = [chosen[1][i] for i in picked] + [rejected[1][i] for i in picked]
        scores = score(m, tokenizer, rows, masks)
        loss, acc = bradley_terry_loss(scores[:len(picked)], scores[len(picked):])
        return loss, {"train_accuracy": acc.item()}

    # Train, then measure on the held-out pairs.
    with tracking.session(ctx):
        model.eval()
        before = held_out_accuracy(model, tokenizer, test_pairs)
        ctx.log({"rm/held_out_pairs": len(test_pairs), "rm/sft_loglik_accuracy": before["loglik_only_accuracy"]}, step=0)
        model = train(ctx, model, schedule, loss_fn, "rm")
        after = held_out_accuracy(model, tokenizer, test_pairs)
        ctx.log({"rm/held_out_accuracy": after["accuracy"], "rm/held_out_head_only_accuracy": after["head_only_accuracy"],
                 "rm/alpha": model.alpha.item()}, step=schedule.steps)

    # Output (rank 0): the LM folder + the head.
    if not ctx.dist.is_main:
        return {}
    out = lm.save_model(model.lm, tokenizer, ctx.output_dir("reward_model"))
    save_file({"head.weight": model.head.weight.detach().contiguous(), "head.bias": model.head.bias.detach().contiguous(),
               "alpha": model.alpha.detach().reshape(()), "loglik": torch.tensor(int(model.loglik))},
              str(out / HEAD_FILE))
    return {"reward_model": out}
