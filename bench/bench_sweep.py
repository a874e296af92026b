"""Time to submit a 100-point sweep as one `jobs submit --sweep` against 100 separate `jobs submit` calls.

Both go to the dev cluster (dev/slurm/up.sh) in one run, with testchain's trivial count stage
(tests/fixtures) over count.steps=1..N, so what is measured is the submit path alone: CLI start,
Hydra composition (once for the sweep, once per call for the single submits) and each point's
config check, input resolution, provenance (git, installed packages, the code snapshot),
`sbatch --test-only`, the run records, pickling and sbatch. Every job is submitted held (the
profile's `hold: true`) and cancelled at the end: nothing runs. The clock stops when the last
`jobs submit` returns (its jobs are then in Slurm's queue). It also counts the sbatch calls each
way (the scheduler's load), from the submission scripts submitit leaves. The goal: the sweep in at
most 10 s on the 2-core development host. One dry run comes first, untimed, so that neither side
pays for compiling the modules.

    .venv/bin/python bench/bench_sweep.py [--points 100]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/lineage.py would shadow the lineage package when this folder is first on sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from lineage.layout import RunDir, run_path, sweep_path  # noqa: E402  (after the sys.path fix above)

ROOT = Path(__file__).resolve().parent.parent
JOBS = str(Path(sys.executable).parent / "jobs")
GOAL_S = 10.0


def jobs(store: Path, env: dict, *args: str) -> str:
    p = subprocess.run([JOBS, "--store", str(store), "submit", "testchain", "--stage", "count", "count.step_s=0",
                        "--executor", "slurm", "--profile", "bench", *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"jobs submit failed: {p.stderr.strip()}")
    return p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100)
    args = ap.parse_args()
    n = args.points
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "profiles.yaml").write_text("bench: {partition: debug, containers: false, sbatch: {hold: true}}\n")
        env = {**os.environ, "JOBS_PROFILES": str(tmp / "profiles.yaml"),
               "JOBS_RECIPES": str(ROOT / "tests/fixtures/recipes"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests/fixtures")])}
        # One dry run first, not timed: every module the submit path imports is compiled and cached, so
        # neither side pays for it.
        jobs(tmp / "warm", env, "--sweep", "count.steps=1,2", "--dry-run")
        load = os.getloadavg()[0]
        try:
            t0 = time.perf_counter()
            out = jobs(tmp / "sweep", env, "--sweep", f"count.steps=range(1,{n + 1})")
            sweep_s = time.perf_counter() - t0
            arrays = [line.split("job ")[1].split()[0] for line in out.splitlines() if "submitted as Slurm" in line]
            t0 = time.perf_counter()
            single = []
            for i in range(1, n + 1):
                out = jobs(tmp / "single", env, f"count.steps={i}")
                single += [line.split("submitted as Slurm job ")[1].split()[0] for line in out.splitlines()
                           if "submitted as Slurm job" in line]
            single_s = time.perf_counter() - t0
        finally:
            subprocess.run(["scancel", *arrays, *single], check=False)
        scripts_sweep = len(list((tmp / "sweep").glob(str(sweep_path(Path(), "*") / "*_submission.sh"))))
        scripts_single = len(list((tmp / "single").glob(str(RunDir(run_path(Path(), "*")).logs / "*_submission.sh"))))
    print(f"load average before: {load:.1f}; {os.cpu_count()} cores\n")
    print("| submit | runs recorded | sbatch calls | wall s | s per point |\n|---|---|---|---|---|")
    print(f"| `jobs submit --sweep count.steps=range(1,{n + 1})` (one job array) | {n} | {scripts_sweep} | "
          f"{sweep_s:.1f} | {sweep_s / n:.3f} |")
    print(f"| {n} x `jobs submit count.steps=I` | {len(single)} | {scripts_single} | {single_s:.1f} | {single_s / n:.3f} |")
    print(f"\nthe sweep is {single_s / sweep_s:.1f}x faster to submit than {n} single submits")
    print(f"goal: the sweep in at most {GOAL_S:g} s: {'met' if sweep_s <= GOAL_S else 'missed'} ({sweep_s:.1f} s)")


if __name__ == "__main__":
    main()
