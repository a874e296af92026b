"""Training throughput of the tiny stages on this machine: tokens/s for pretrain and SFT.

Runs each stage's real code (a StageContext on the data stage's output, trackers off) for --steps
steps and divides the tokens the model computed on by the wall time of the training loop (from the
stage's own metrics.jsonl timestamps: model load and save are not counted; they are shown apart).

    .venv/bin/python bench/train.py [--steps 100] [--threads 2]

Pretrain batches are packed blocks (every token counts); SFT batches are rows padded on the right
to the longest (padding counted), of which only the answer tokens carry loss: both columns are shown.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

JOBS = str(Path(sys.executable).parent / "jobs")


def loop_seconds(run_dir: Path, stage: str) -> float:
    """From the step-0 line (logged just before the loop) to the last loss line."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = [r["time"] for r in rows if r["step"] == 0][-1]
    end = [r["time"] for r in rows if f"{stage}/loss" in r][-1]
    return end - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (the context's cpus_per_task)")
    args = ap.parse_args()
    from jobs import recipes
    from stages.contract import Resources, StageContext
    from lineage import Store
    from stages import pretrain, sft
    from stages.ml import batches, lm

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        subprocess.run([JOBS, "--store", str(root), "submit", "tiny", "--stage", "data"], check=True, capture_output=True)
        store = Store(root)
        data = {r: Path(store.artifact(store.resolve_artifact(f"tiny/data/{r}:latest"))["path"])
                for r in ("corpus", "tokenizer", "sft")}
        tok = lm.load_tokenizer(data["tokenizer"])

        def ctx(stage: str, inputs: dict) -> StageContext:
            off = ["tracking.wandb=disabled", "tracking.tensorboard=false", f"{stage}.steps={args.steps}",
                   f"{stage}.checkpoint_every={args.steps + 1}", f"{stage}.warmup={min(10, args.steps - 1)}"]
            cfg = recipes.compose(recipes.load("tiny"), stage, off)
            (Path(tmp) / stage).mkdir()
            return StageContext(run_id=f"bench-{stage}", recipe="tiny", stage=stage, config=cfg, inputs=inputs,
                                run_dir=Path(tmp) / stage, resources=Resources(cpus_per_task=args.threads))

        # pretrain: every step computes on batch_size blocks of max_len tokens
        c = ctx("pretrain", {"corpus": data["corpus"], "tokenizer": data["tokenizer"]})
        t0 = time.perf_counter()
        model_dir = pretrain.run(c)["model"]
        total = time.perf_counter() - t0
        p = c.config["pretrain"]
        tokens = p["batch_size"] * p["model"]["max_len"] * args.steps
        loop = loop_seconds(c.run_dir, "pretrain")
        rows.append(("pretrain", args.steps, tokens / loop, tokens / loop, loop, total - loop))

        # sft: each step computes on its rows padded to the longest; answer tokens carry the loss
        c = ctx("sft", {"model": model_dir, "data": data["sft"]})
        pairs = [json.loads(x) for x in (data["sft"] / "train.jsonl").read_text().splitlines()]
        enc, masks = sft.encode_pairs(tok, pairs)
        seed, size = c.config["seed"], c.config["sft"]["batch_size"]
        picked = [batches.indices(seed, s, len(enc), size) for s in range(args.steps)]
        tokens = sum(len(step) * max(len(enc[i]) for i in step) for step in picked)   # padding included
        loss_tokens = sum(sum(masks[i]) for step in picked for i in step)
        t0 = time.perf_counter()
        sft.run(c)
        total = time.perf_counter() - t0
        loop = loop_seconds(c.run_dir, "sft")
        rows.append(("sft", args.steps, tokens / loop, loss_tokens / loop, loop, total - loop))

    print(f"threads: {args.threads}; load average at the end: {os.getloadavg()[0]:.2f}\n")
    print("| stage | steps | tokens/s | loss tokens/s | loop s | load + save s |\n|---|---|---|---|---|---|")
    for name, steps, tps, ltps, loop, rest in rows:
        print(f"| {name} | {steps} | {tps:,.0f} | {ltps:,.0f} | {loop:.1f} | {rest:.1f} |")


if __name__ == "__main__":
    main()
