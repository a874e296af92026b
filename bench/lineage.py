"""Lineage queries on a big store: `jobs lineage` of a deep artifact and `jobs list`, plus index rebuild.

Builds (once, cached under /tmp) a store of --runs runs, each registering one artifact: a chain of
--depth runs, each consuming the previous one's output, and the rest spread over the same recipes
with random inputs. Then times the real console script in a subprocess (median of --repeats),
warm index, and `jobs index --rebuild`. Goal from the issue: lineage and list each under 100 ms.

    .venv/bin/python bench/lineage.py [--runs 100000] [--depth 40]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

JOBS = str(Path(sys.executable).parent / "jobs")
# This file's name is the store package's name: keep bench/ off the import path so `lineage` is ours.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def build_slice(args: tuple[str, int, int, int]) -> None:
    """Runs [start, stop) of the bulk: each consumes a random earlier artifact of its own slice."""
    from lineage import Store

    root, start, stop, seed = args
    store = Store(Path(root))
    rng = random.Random(seed)
    mine: list[str] = []
    work = Path(root).parent / f"work-{Path(root).name}"
    for i in range(start, stop):
        inputs = {"data": rng.choice(mine)} if mine and rng.random() < 0.8 else {}
        run = store.create_run({"recipe": "bench", "stage": f"s{i % 7}", "inputs": inputs, "config": {"i": i}})
        d = work / f"{i}"
        d.mkdir(parents=True)
        (d / "out.txt").write_text(str(i))
        art = store.register(d, kind="model", name=f"bench/s{i % 7}/model", run=run)
        store.add_event(run, "outputs", outputs={"model": art})
        store.add_event(run, "status", state="SUCCEEDED")
        mine.append(art)


def build(root: Path, runs: int, depth: int) -> str:
    """Returns the deepest artifact of the chain."""
    from lineage import Store

    store = Store.open(root, create=True)
    prev = None
    work = root.parent / f"work-{root.name}"
    for i in range(depth):
        run = store.create_run({"recipe": "bench", "stage": "chain", "inputs": {"model": prev} if prev else {},
                                "config": {"depth": i}})
        d = work / f"chain{i}"
        d.mkdir(parents=True)
        (d / "w.bin").write_text(f"chain {i}")
        prev = store.register(d, kind="model", name="bench/chain/model", run=run)
        store.add_event(run, "outputs", outputs={"model": prev})
        store.add_event(run, "status", state="SUCCEEDED")
    bulk = runs - depth
    procs = max(1, mp.cpu_count())
    bounds = [(str(root), depth + k * bulk // procs, depth + (k + 1) * bulk // procs, k) for k in range(procs)]
    with mp.Pool(procs) as pool:
        pool.map(build_slice, bounds)
    (root / "bench-deepest.txt").write_text(prev)
    return prev


def timed(args: list[str], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([JOBS, *args], check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/jobs-bench-lineage"))
    args = ap.parse_args()
    root = args.dir / f"store-{args.runs}-{args.depth}-v1"
    if (root / "bench-deepest.txt").exists():
        deepest = (root / "bench-deepest.txt").read_text()
        print(f"reusing {root}")
    else:
        t0 = time.perf_counter()
        deepest = build(root, args.runs, args.depth)
        print(f"built {root}: {args.runs} runs and artifacts in {time.perf_counter() - t0:.0f} s")
    store = ["--store", str(root)]
    rebuild = timed([*store, "index", "--rebuild"], 1)[0]
    timed([*store, "list"], 1)  # settle the index
    time.sleep(2.1)
    timed([*store, "list"], 1)
    rows = [
        ("jobs --help", timed(["--help"], args.repeats)),
        ("jobs list", timed([*store, "list"], args.repeats)),
        (f"jobs lineage (depth {args.depth})", timed([*store, "lineage", deepest], args.repeats)),
        (f"jobs lineage --format mermaid", timed([*store, "lineage", deepest, "--format", "mermaid"], args.repeats)),
        ("jobs show ART", timed([*store, "show", deepest], args.repeats)),
    ]
    print(f"\nstore: {args.runs:,} runs, {args.runs:,} artifacts\n")
    print("| command | median ms | best ms | goal |\n|---|---|---|---|")
    for name, xs in rows:
        goal = "< 100 ms" if name.startswith(("jobs list", "jobs lineage")) else ""
        print(f"| {name} | {statistics.median(xs) * 1000:.0f} | {min(xs) * 1000:.0f} | {goal} |")
    print(f"| jobs index --rebuild | {rebuild * 1000:.0f} | | reported |")


if __name__ == "__main__":
    main()
