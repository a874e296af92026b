"""Pretrain: a causal LM on the corpus, from a model built from config (no download).

Inputs:  corpus (corpus: train.txt, one sequence per line), tokenizer (HF tokenizer folder)
Outputs: model (HF folder: config, model.safetensors, generation config, tokenizer)
Launch:  jobs submit tiny --stage pretrain [pretrain.steps=300]
Backend: torch on CPU (tiny). nano3's `backend: megatron` runs in the GPU container (stages/megatron).
"""
from __future__ import annotations

from pathlib import Path

from stages import batches, lm, tracking
from stages.loop import Schedule, train
from stages.losses import causal_lm_loss


def run(ctx) -> dict[str, Path]:
    cfg = ctx.config["pretrain"]
    if cfg.get("backend", "torch") != "torch":
        from stages.megatron import launch

        return launch.run_stage(ctx, "pretrain")
    lm.setup_torch(ctx.config["seed"])

    # Setup, in dependency order: tokenizer -> data -> model -> trackers.
    tokenizer = lm.load_tokenizer(ctx.input("tokenizer"))
    lines = (ctx.input("corpus") / "train.txt").read_text().splitlines()
    rows = lm.encode(tokenizer, lines, bos=True, eos=True)
    too_long = max(len(r) for r in rows)
    if too_long > cfg["model"]["max_len"]:
        raise ValueError(f"a corpus line has {too_long} tokens; pretrain.model.max_len is {cfg['model']['max_len']}")
    model = lm.build_model(cfg["model"], tokenizer)
    trackers = tracking.start(ctx)
    ctx.log({"pretrain/parameters": sum(p.numel() for p in model.parameters())}, step=0)

    def loss_fn(m, step, rank, world):
        seed, size = ctx.config["seed"], cfg["batch_size"]
        everyone = batches.indices(seed, step, len(rows), size)
        picked = batches.indices(seed, step, len(rows), size, rank, world)
        ids, mask = lm.pad([rows[i] for i in picked], tokenizer.pad_token_id)
        tokens = sum(len(rows[i]) - 1 for i in everyone) / world
        return causal_lm_loss(m, ids, mask, mask, tokens), {}

    model = train(ctx, model, Schedule.from_config(cfg), loss_fn, "pretrain")
    tracking.stop(trackers)
    if not ctx.dist.is_main:
        return {}
    return {"model": lm.save_model(model, tokenizer, ctx.output_dir("model"))}
