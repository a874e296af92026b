"""Reward model: a scalar head on the SFT model, trained with the Bradley-Terry loss on preferences.

Inputs:  model (the SFT causal LM folder), data (pref-data: train.jsonl of {"prompt", "chosen", "rejected"})
Outputs: reward_model (HF sequence-classification folder, one label: the reward)
Launch:  jobs submit tiny --stage rm [rm.steps=300]
The last `rm.held_out` share of pairs is never trained on; preference accuracy is reported on it.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages import batches, lm, tracking
from stages.loop import Schedule, train
from stages.losses import bradley_terry_loss


def rewards(model, tokenizer, rows: list[list[int]]):
    """One scalar per row (the score at its last token; rows are right-padded)."""
    ids, mask = lm.pad(rows, tokenizer.pad_token_id)
    return model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)


def run(ctx) -> dict[str, Path]:
    import torch

    cfg = ctx.config["rm"]
    lm.setup_torch(ctx.config["seed"])
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    model = lm.load_model(ctx.input("model"), cls="reward")
    model.config.pad_token_id = tokenizer.pad_token_id  # the score is read at the last non-pad token
    pairs = [json.loads(line) for line in (ctx.input("data") / "train.jsonl").read_text().splitlines()]
    cut = int(len(pairs) * (1 - cfg["held_out"]))
    train_pairs, test_pairs = pairs[:cut], pairs[cut:]

    def encode(ps: list[dict], key: str) -> list[list[int]]:
        return lm.encode(tokenizer, [p["prompt"] + p[key] for p in ps], bos=True, eos=True)

    chosen, rejected = encode(train_pairs, "chosen"), encode(train_pairs, "rejected")
    trackers = tracking.start(ctx)

    def loss_fn(m, step, rank, world):
        picked = batches.indices(ctx.config["seed"], step, len(chosen), cfg["batch_size"], rank, world)
        scores = rewards(m, tokenizer, [chosen[i] for i in picked] + [rejected[i] for i in picked])
        half = len(picked)
        loss, acc = bradley_terry_loss(scores[:half], scores[half:])
        return loss, {"accuracy": acc.item()}

    model = train(ctx, model, Schedule.from_config(cfg), loss_fn, "rm")
    with torch.no_grad():
        margin = rewards(model, tokenizer, encode(test_pairs, "chosen")) - rewards(model, tokenizer, encode(test_pairs, "rejected"))
    ctx.log({"rm/held_out_accuracy": (margin > 0).float().mean().item(), "rm/held_out_pairs": len(test_pairs)}, step=cfg["steps"])
    tracking.stop(trackers)
    if not ctx.dist.is_main:
        return {}
    return {"reward_model": lm.save_model(model, tokenizer, ctx.output_dir("reward_model"))}
