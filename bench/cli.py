"""CLI start-up: `jobs --help` and `jobs list` on a store of --runs runs (median of --repeats).

Also checks what the CLI imports at start: none of torch, ray, transformers, submitit, hydra, wandb.
The store is built once with the store API and cached under /tmp.

    .venv/bin/python bench/cli.py [--runs 10000]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

JOBS = str(Path(sys.executable).parent / "jobs")
HEAVY = ("torch", "ray", "transformers", "submitit", "hydra", "wandb", "numpy")


def build(root: Path, runs: int) -> None:
    from lineage import Store

    store = Store.open(root, create=True)
    for i in range(runs):
        run = store.create_run({"recipe": "tiny", "stage": ("data", "sft", "rl")[i % 3], "inputs": {}, "config": {"i": i}})
        store.add_event(run, "status", state="SUCCEEDED")
    (root / "bench-complete").touch()


def timed(args: list[str], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([JOBS, *args], check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    root = Path(f"/tmp/jobs-bench-cli/store-{args.runs}-v1")
    if not (root / "bench-complete").exists():
        build(root, args.runs)
    cold = timed(["--store", str(root), "index", "--rebuild"], 1)[0]
    time.sleep(2.1)  # past the index's settle window
    timed(["--store", str(root), "list"], 1)
    rows = [("jobs --help", timed(["--help"], args.repeats)),
            (f"jobs list ({args.runs:,} runs, warm index)", timed(["--store", str(root), "list"], args.repeats))]
    probe = subprocess.run([sys.executable, "-c", "import sys, jobs.cli; jobs.cli.build_parser(); "
                            f"print([m for m in {HEAVY!r} if m in sys.modules])"], capture_output=True, text=True)
    print("| command | median s | best s | goal |\n|---|---|---|---|")
    for name, xs in rows:
        print(f"| {name} | {statistics.median(xs):.3f} | {min(xs):.3f} | <= 0.3 s |")
    print(f"| jobs index --rebuild ({args.runs:,} runs) | {cold:.3f} | | reported |")
    print(f"\nheavy modules imported at CLI start: {probe.stdout.strip()}")


if __name__ == "__main__":
    main()
