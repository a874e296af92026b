"""Pretrain: a causal LM on the corpus, from a Llama-style model built from config (no download).

Inputs:  corpus    (corpus: train.txt, one document per line; or nano3's pretrain-blend, Megatron
                    shards + blend.json, read by stages/ml/formats.py)
         tokenizer (tokenizer: an HF tokenizer folder)
Outputs: model     (model: HF folder with config.json, model.safetensors, generation_config.json
                    and the tokenizer files, so downstream stages need this one input)
Launch:  jobs submit tiny --stage pretrain [pretrain.steps=300] [device=cuda]
         (inside the job: stages.pretrain.run(ctx); several ranks with ctx.dist -> DDP over gloo/nccl)
Backend: `pretrain.backend: torch` trains here on CPU; `megatron` (nano3) hands the stage to
         Megatron-Bridge in the GPU container (stages/backends/megatron/).

Sequence packing: the documents (<bos> line <eos>) are shuffled once with the seed, concatenated and
cut into blocks of `model.max_len` tokens, so no step computes on padding. A batch is a set of
block indices drawn from (seed, step): the data position is the step number.
"""
from __future__ import annotations

import random
from pathlib import Path

from stages.schema import Float, Int, Map, Str, check
from stages.ml import batches, formats, lm, tracking
from stages.ml.loop import Schedule, train
from stages.ml.losses import causal_lm_loss
from stages.contract import StageError


def pack(rows: list[list[int]], block: int, seed: int) -> list[list[int]]:
    """Documents shuffled with `seed`, concatenated, cut into full blocks of `block` tokens."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    stream = [t for i in order for t in rows[i]]
    return [stream[i:i + block] for i in range(0, len(stream) - block + 1, block)]


BACKENDS = ("torch", "megatron")
TORCH = Map({
    "backend": Str(choices=BACKENDS),
    "model": Map({k: Int(1, 1 << 20) for k in lm.ARCH_KEYS}, extra=True),
    "steps": Int(1, 10**9), "batch_size": Int(1, 1 << 20), "lr": Float(0, 1, open_lo=True),
}, extra=True)


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `pretrain:` section, before submit (either backend)."""
    from stages.backends.megatron import launch

    return launch.check_stage(config, "pretrain", resources, lambda cfg: (check(cfg, TORCH, "pretrain") or lm.arch_problems(cfg["model"])
                                                              or Schedule.problems(cfg, "pretrain"))
                              + lm.device_problems(config, resources))


def notes(config: dict) -> list[str]:
    """What submit says of the schedule (either backend): a warmup not below a short run's steps is shortened."""
    from stages.backends.megatron import launch

    return launch.notes_stage(config, "pretrain", lambda cfg: Schedule.notes(cfg, "pretrain"))

def preview(config: dict, resources: dict) -> str | None:
    from stages.backends.megatron import launch

    return launch.preview_stage(config, "pretrain", resources)


def gate(ctx, produced: dict[str, Path]) -> list:
    """What a finished pretrain must show (stages/gate.py): every step the config asked for, a finite
    loss, a model that loads."""
    from stages import gate as g

    return g.language_model(ctx, produced, "pretrain")


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("pretrain")
    if cfg.get("backend", "torch") == "megatron":
        from stages.backends.megatron import launch

        return launch.run_stage(ctx, "pretrain")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("pretrain: " + "; ".join(problems))

    # Fail fast: every problem with the config in one message, before any work.
    problems = lm.arch_problems(cfg.get("model", {}))
    if cfg.get("backend", "torch") != "torch":
        problems.append(f"pretrain.backend must be torch or megatron (got {cfg['backend']!r})")
    if cfg.get("batch_size", 0) % ctx.dist.world_size:
        problems.append(f"pretrain.batch_size {cfg.get('batch_size')} does not split over {ctx.dist.world_size} ranks")
    if problems:
        raise StageError("pretrain: " + "; ".join(problems))
    schedule = Schedule.from_config(cfg)
    seed = ctx.config["seed"]
    device = lm.device_of(ctx.config)
    threads = lm.setup_torch(seed, ctx.dist, device, ctx.resources.cpus_per_task)

    # Setup, in dependency order: tokenizer -> packed data -> model (its vocabulary is the tokenizer's).
    tokenizer = lm.load_tokenizer(ctx.input("tokenizer"))
    blocks = pack(formats.pretrain_documents(ctx.input("corpus"), tokenizer), cfg["model"]["max_len"], seed)
    if len(blocks) < cfg["batch_size"]:
        raise StageError(f"the corpus makes {len(blocks)} blocks of {cfg['model']['max_len']} tokens, "
                         f"fewer than pretrain.batch_size {cfg['batch_size']}")
    model = formats.base_model(ctx.config, cfg["model"], tokenizer)

    def loss_fn(m, step, rank, world):
        import torch

        picked = batches.indices(seed, step, len(blocks), cfg["batch_size"], rank, world)
        ids = torch.tensor([blocks[i] for i in picked], device=device)
        return causal_lm_loss(m, ids, None, None), {}

    # Train (rank 0 logs to W&B/TensorBoard; all ranks train).
    with tracking.session(ctx):
        ctx.log({"pretrain/parameters": sum(p.numel() for p in model.parameters()), "pretrain/blocks": len(blocks),
                 "pretrain/tokens_per_step": cfg["batch_size"] * cfg["model"]["max_len"], "pretrain/threads": threads},
                step=0)
        model = train(ctx, model, schedule, loss_fn, "pretrain", device)

    # Output: rank 0 writes the model folder; the entry registers it as an artifact.
    if not ctx.dist.is_main:
        return {}
    with ctx.timed("save"):
        return {"model": lm.save_model(model, tokenizer, ctx.output_dir("model"))}
