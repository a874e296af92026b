"""CLI start-up: wall clock of `jobs --help` and `jobs list` on a store of --runs runs, and what they import.

Runs the real console script (.venv/bin/jobs) in a subprocess, --repeats times each, and reports
the median and best. `jobs list` is measured with a warm index (already synced: the normal case) and
with a cold one (the per-host index.sqlite deleted, so the first sync reads every record: --cold-repeats times).
Then runs both commands once under `python -X importtime` and lists what they import: none of
torch, ray or transformers may be among them.

The store (each run: a run record, a QUEUED and a SUCCEEDED status event) is built once, in this
process with the store API, and cached in --cache-dir under a name that carries the run count and a
format stamp, so later runs reuse it; `--clean` deletes the cache. Nothing else is left behind.

    .venv/bin/python bench/cli.py [--runs 10000] [--repeats 10] [--cold-repeats 3] [--clean]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# bench/lineage.py would shadow the lineage package when this folder is first on sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from lineage.store import cache_dir  # noqa: E402  (after the sys.path fix above)

JOBS = str(Path(sys.executable).parent / "jobs")
STAMP = "v1"  # bump when build() changes, so a cached store of the old shape is not reused
GOAL = 0.3
MUST_NOT_IMPORT = ("torch", "ray", "transformers")
ALSO_HEAVY = ("submitit", "hydra", "omegaconf", "wandb", "numpy")
COMPLETE = "bench-complete"


def build(root: Path, runs: int) -> float:
    """`runs` runs made through the store API; built beside `root`, renamed into place when whole."""
    from lineage import Store

    t0 = time.perf_counter()
    tmp = root.with_name(f"{root.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # a fixture, not data: 10x faster to build without a flush per record
    try:
        store = Store.open(tmp, create=True)
        for i in range(runs):
            run = store.create_run({"recipe": "tiny", "stage": ("data", "sft", "rl")[i % 3], "inputs": {},
                                    "config": {"i": i}})
            store.add_event(run, "status", state="SUCCEEDED")
    finally:
        os.fsync = real_fsync
    os.sync()
    (tmp / COMPLETE).touch()
    shutil.rmtree(root, ignore_errors=True)
    os.rename(tmp, root)
    return time.perf_counter() - t0


def jobs(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([JOBS, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def imports(args: list[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """Top-level packages a command imports, and its slowest imports (cumulative microseconds)."""
    out = subprocess.run([sys.executable, "-X", "importtime", JOBS, *args], check=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
    names, slow = set(), []
    for line in out.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        names.add(name.strip().split(".")[0])
        if not name.startswith("  "):  # top level of the import tree
            slow.append((int(cumulative), name.strip()))
    return names, sorted(slow, reverse=True)[:4]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000, help="runs in the store (default 10000)")
    ap.add_argument("--repeats", type=int, default=10, help="timed runs of each command (default 10)")
    ap.add_argument("--cold-repeats", type=int, default=3, help="timed `jobs list` with a cold index (default 3)")
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/jobs-bench-cli"),
                    help="where the store is kept between runs (default /tmp/jobs-bench-cli)")
    ap.add_argument("--clean", action="store_true", help="delete the cached store(s) and exit")
    args = ap.parse_args()

    if args.clean:
        shutil.rmtree(args.cache_dir, ignore_errors=True)
        print(f"removed {args.cache_dir}")
        return 0
    root = args.cache_dir / f"store-{args.runs}-{STAMP}"
    for old in args.cache_dir.glob("store-*"):  # other stamps, or half-built stores of killed runs
        if not old.name.endswith(f"-{STAMP}") or ".building-" in old.name:
            shutil.rmtree(old, ignore_errors=True)
    built = None
    if not (root / COMPLETE).exists():
        built = build(root, args.runs)
    store = ["--store", str(root)]
    load_before = os.getloadavg()

    # Cold: the first sync after the runs were made reads every record file.
    cold = []
    for _ in range(args.cold_repeats):
        (cache_dir(root) / "index.sqlite").unlink(missing_ok=True)
        cold.append(jobs([*store, "list"]))
    if built is not None:
        time.sleep(2.1)  # folders touched in the index's 2 s settle window would be re-read at every sync
        jobs([*store, "list"])
    rows = [
        ("jobs --help", [jobs(["--help"]) for _ in range(args.repeats)], True),
        (f"jobs list, warm index ({args.runs:,} runs)", [jobs([*store, "list"]) for _ in range(args.repeats)], True),
        (f"jobs list, cold index ({args.runs:,} runs: first sync)", cold, False),
    ]
    load_after = os.getloadavg()
    found = {}
    for name, cmd in (("jobs --help", ["--help"]), ("jobs list", [*store, "list"])):
        found[name] = imports(cmd)

    print(f"\n{args.runs:,} runs ({3 * args.runs:,} record files) in {root}"
          + (f", built in {built:.1f} s" if built is not None else ", cached")
          + f"; load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after\n")
    print("| command | median s | best s | runs | goal | met |\n|---|---:|---:|---:|---|---|")
    for name, xs, goal in rows:
        med = statistics.median(xs)
        print(f"| {name} | {med:.3f} | {min(xs):.3f} | {len(xs)} | "
              + (f"<= {GOAL} s | {'yes' if med <= GOAL else 'NO'} |" if goal else "reported | |"))
    print()
    for name, (names, slow) in found.items():
        bad = [m for m in MUST_NOT_IMPORT if m in names]
        heavy = [m for m in ALSO_HEAVY if m in names]
        print(f"`{name}` imports {len(names)} top-level modules; torch/ray/transformers: "
              f"{', '.join(bad) if bad else 'none'}; other heavy ones: {', '.join(heavy) if heavy else 'none'}; "
              "slowest: " + ", ".join(f"{n} {us / 1000:.0f} ms" for us, n in slow))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
