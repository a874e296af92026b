"""SFT: prompt/answer pairs; the loss counts only the answer tokens and the end-of-sequence token.

Inputs:  model (model: a causal LM folder, pretrain's by default)
         data  (sft-data: train.jsonl of {"prompt": "23+45=", "answer": "68"}, or nano3's
                prep_sft layout, training.jsonl of {"input", "output"}: stages/ml/formats.py)
Outputs: model (model: HF folder, as pretrain's)
Launch:  jobs submit tiny --stage sft [sft.lr=1e-3 sft.steps=2000]
Backend: `sft.backend: torch` here; `megatron` (nano3) runs Megatron-Bridge's finetune in the GPU
         container (stages/backends/megatron/).

Each global batch is drawn uniformly from all rows and padded on the right (loss mask 0 there).
Batches of one token length each (no padding) were tried and dropped: a row's length includes its
answer, so a bucket held only two-digit or only three-digit sums, the gradient swung with the
bucket, and whether held-out accuracy rose within the step budget depended on the seed and the CPU
(greedy 0.11 to 0.57 over seeds and thread counts on one host). Batches are a pure function of
(seed, step), so the data position is the step number.
"""
from __future__ import annotations

from pathlib import Path

from stages.schema import Float, Int, Map, Str, check
from stages.ml import batches, formats, lm, tracking
from stages.ml.loop import Schedule, train
from stages.ml.losses import causal_lm_loss
from stages.contract import StageError


def pad_right(rows: list[list[int]], masks: list[list[int]], pad_id: int):
    """(ids, loss mask) tensors, rows padded on the right to the longest. Attention is causal, so no
    real token sees the padding after it: no attention mask, and the same logits as unpadded rows."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    return ids, torch.tensor([m + [0] * (width - len(m)) for m in masks])


def encode_pairs(tokenizer, pairs: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
    """Token rows (<bos> prompt answer <eos>) and their loss masks (1 on answer and <eos>)."""
    prompts = lm.encode(tokenizer, [p["prompt"] for p in pairs], bos=True)
    answers = lm.encode(tokenizer, [p["answer"] for p in pairs], bos=False, eos=True)
    rows = [p + a for p, a in zip(prompts, answers)]
    masks = [[0] * len(p) + [1] * len(a) for p, a in zip(prompts, answers)]
    return rows, masks


BACKENDS = ("torch", "megatron")
TORCH = Map({
    "backend": Str(choices=BACKENDS),
    "steps": Int(1, 10**9), "batch_size": Int(1, 1 << 20), "lr": Float(0, 1, open_lo=True),
}, extra=True)


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `sft:` section, before submit (either backend)."""
    from stages.backends.megatron import launch

    return launch.check_stage(config, "sft", resources, lambda cfg: (check(cfg, TORCH, "sft") or Schedule.problems(cfg, "sft"))
                              + lm.device_problems(config, resources))


def notes(config: dict) -> list[str]:
    """What submit says of the schedule (either backend): a warmup not below a short run's steps is shortened."""
    from stages.backends.megatron import launch

    return launch.notes_stage(config, "sft", lambda cfg: Schedule.notes(cfg, "sft"))

def preview(config: dict, resources: dict) -> str | None:
    from stages.backends.megatron import launch

    return launch.preview_stage(config, "sft", resources)


def gate(ctx, produced: dict[str, Path]) -> list:
    """What a finished sft must show (stages/gate.py): every step the config asked for, a finite
    loss, a model that loads."""
    from stages import gate as g

    return g.language_model(ctx, produced, "sft")


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("sft")
    if cfg.get("backend", "torch") == "megatron":
        from stages.backends.megatron import launch

        return launch.run_stage(ctx, "sft")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("sft: " + "; ".join(problems))

    # Fail fast.
    problems = []
    if cfg.get("backend", "torch") != "torch":
        problems.append(f"sft.backend must be torch or megatron (got {cfg['backend']!r})")
    if cfg.get("batch_size", 0) % ctx.dist.world_size:
        problems.append(f"sft.batch_size {cfg.get('batch_size')} does not split over {ctx.dist.world_size} ranks")
    if problems:
        raise StageError("sft: " + "; ".join(problems))
    schedule = Schedule.from_config(cfg)
    seed = ctx.config["seed"]
    device = lm.device_of(ctx.config)
    threads = lm.setup_torch(seed, ctx.dist, device, ctx.resources.cpus_per_task)

    # Setup: the model folder carries its tokenizer; pairs -> rows + answer masks.
    with ctx.timed("load"):
        model = lm.load_model(ctx.input("model"))
        tokenizer = lm.load_tokenizer(ctx.input("model"))
    pairs = formats.sft_pairs(ctx.input("data"))
    rows, masks = encode_pairs(tokenizer, pairs)
    longest = max(len(r) for r in rows)
    if longest > model.config.max_position_embeddings:
        raise StageError(f"an SFT row has {longest} tokens; the model's max_position_embeddings is "
                         f"{model.config.max_position_embeddings}")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0   # any id: masked, never attended

    def loss_fn(m, step, rank, world):
        everyone = batches.indices(seed, step, len(rows), cfg["batch_size"])
        picked = batches.indices(seed, step, len(rows), cfg["batch_size"], rank, world)
        ids, loss_mask = pad_right([rows[i] for i in picked], [masks[i] for i in picked], pad_id)
        # Normalise by the answer tokens of the whole global batch (see causal_lm_loss).
        tokens = sum(sum(masks[i][1:]) for i in everyone) / world
        return causal_lm_loss(m, ids.to(device), None, loss_mask.to(device), tokens), {}

    # Train.
    with tracking.session(ctx):
        ctx.log({"sft/pairs": len(pairs), "sft/threads": threads}, step=0)
        model = train(ctx, model, schedule, loss_fn, "sft", device)

    # Output (rank 0).
    if not ctx.dist.is_main:
        return {}
    with ctx.timed("save"):
        return {"model": lm.save_model(model, tokenizer, ctx.output_dir("model"))}
