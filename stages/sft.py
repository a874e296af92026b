"""SFT: prompt/answer pairs; the loss counts only answer tokens (and the end-of-sequence token).

Inputs:  model (a causal LM folder), data (sft-data: train.jsonl of {"prompt", "answer"})
Outputs: model (HF folder)
Launch:  jobs submit tiny --stage sft [sft.lr=1e-3]
Batches come from one length bucket at a time, so no step pays for padding.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages import batches, lm, tracking
from stages.loop import Schedule, train
from stages.losses import causal_lm_loss


def encode_pairs(tokenizer, pairs: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
    """Token rows (bos + prompt + answer + eos) and their loss masks (1 on answer and eos)."""
    prompts = lm.encode(tokenizer, [p["prompt"] for p in pairs], bos=True)
    answers = lm.encode(tokenizer, [p["answer"] for p in pairs], bos=False, eos=True)
    rows = [p + a for p, a in zip(prompts, answers)]
    masks = [[0] * len(p) + [1] * len(a) for p, a in zip(prompts, answers)]
    return rows, masks


def run(ctx) -> dict[str, Path]:
    cfg = ctx.config["sft"]
    if cfg.get("backend", "torch") != "torch":
        from stages.megatron import launch

        return launch.run_stage(ctx, "sft")
    lm.setup_torch(ctx.config["seed"])

    model = lm.load_model(ctx.input("model"))
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    pairs = [json.loads(line) for line in (ctx.input("data") / "train.jsonl").read_text().splitlines()]
    rows, masks = encode_pairs(tokenizer, pairs)
    groups = batches.by_length(rows)
    trackers = tracking.start(ctx)

    def loss_fn(m, step, rank, world):
        import torch

        seed, size = ctx.config["seed"], cfg["batch_size"]
        everyone = batches.bucketed(seed, step, groups, size)
        picked = batches.bucketed(seed, step, groups, size, rank, world)
        ids = torch.tensor([rows[i] for i in picked])
        loss_mask = torch.tensor([masks[i] for i in picked])
        tokens = sum(sum(masks[i][1:]) for i in everyone) / world
        return causal_lm_loss(m, ids, torch.ones_like(ids), loss_mask, tokens), {}

    model = train(ctx, model, Schedule.from_config(cfg), loss_fn, "sft")
    tracking.stop(trackers)
    if not ctx.dist.is_main:
        return {}
    return {"model": lm.save_model(model, tokenizer, ctx.output_dir("model"))}
