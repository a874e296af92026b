"""Training throughput of the tiny stages on this machine: tokens/s for pretrain and SFT.

Runs each stage's real code (through a StageContext, trackers off) for --steps steps on the data
stage's output, and divides the tokens the model saw by the wall time of the loop.

    .venv/bin/python bench/train.py [--steps 60]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

JOBS = str(Path(sys.executable).parent / "jobs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    from jobs import recipes
    from jobs.context import StageContext
    from lineage import Store
    from stages import lm, pretrain, sft

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        subprocess.run([JOBS, "--store", str(root), "submit", "tiny", "--stage", "data"], check=True, capture_output=True)
        store = Store(root)
        data = {r: Path(store.artifact(store.resolve_artifact(f"tiny/data/{r}:latest"))["path"])
                for r in ("corpus", "tokenizer", "sft")}
        off = ["tracking.wandb=disabled", "tracking.tensorboard=false"]
        tok = lm.load_tokenizer(data["tokenizer"])
        rows = []

        def ctx(stage: str, inputs: dict, extra: list[str]) -> StageContext:
            cfg = recipes.compose(recipes.load("tiny"), stage, [*off, *extra])
            (Path(tmp) / stage).mkdir()
            return StageContext(run_id=f"bench-{stage}", recipe="tiny", stage=stage, config=cfg, inputs=inputs,
                                run_dir=Path(tmp) / stage)

        # pretrain: tokens per step = non-pad tokens of the batch
        c = ctx("pretrain", {"corpus": data["corpus"], "tokenizer": data["tokenizer"]},
                [f"pretrain.steps={args.steps}", f"pretrain.checkpoint_every={args.steps + 1}"])
        lines = (data["corpus"] / "train.txt").read_text().splitlines()
        mean_len = sum(len(r) for r in lm.encode(tok, lines, eos=True)) / len(lines)
        t0 = time.perf_counter()
        model_dir = pretrain.run(c)["model"]
        secs = time.perf_counter() - t0
        rows.append(("pretrain", args.steps, c.config["pretrain"]["batch_size"] * mean_len * args.steps / secs, secs))

        c = ctx("sft", {"model": model_dir, "data": data["sft"]},
                [f"sft.steps={args.steps}", f"sft.checkpoint_every={args.steps + 1}"])
        pairs = [json.loads(x) for x in (data["sft"] / "train.jsonl").read_text().splitlines()]
        mean_len = sum(len(r) for r in sft.encode_pairs(tok, pairs)[0]) / len(pairs)
        t0 = time.perf_counter()
        sft.run(c)
        secs = time.perf_counter() - t0
        rows.append(("sft", args.steps, c.config["sft"]["batch_size"] * mean_len * args.steps / secs, secs))

    print("| stage | steps | tokens/s | seconds (incl. load and save) |\n|---|---|---|---|")
    for name, steps, tps, secs in rows:
        print(f"| {name} | {steps} | {tps:,.0f} | {secs:.1f} |")


if __name__ == "__main__":
    main()
