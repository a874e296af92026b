"""Time from `jobs submit --executor slurm` to PENDING, against a plain `sbatch` of the same script.

Both go to the dev cluster (dev/slurm/up.sh) in one run. Ours includes everything a user waits
for: CLI start, Hydra composition, input resolution, provenance (git, installed packages),
`sbatch --test-only` validation, the run record, pickling the job and sbatch itself.

    .venv/bin/python bench/submit.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = str(Path(sys.executable).parent / "jobs")
HOLD = ["--hold"]  # submitted held: they stay PENDING and never compete for the benchmark's CPUs


def pending(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
    return out.strip() == "PENDING"


def time_ours(store: Path, env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([JOBS, "--store", str(store), "submit", "testchain", "--stage", "count", "--executor", "slurm",
                        "--profile", "bench"], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"jobs submit failed: {p.stderr.strip()}")
    job = p.stdout.split("submitted as Slurm job ")[1].split()[0]
    while not pending(job):
        time.sleep(0.005)
    return time.perf_counter() - t0, job


def time_sbatch(script: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(["sbatch", "--parsable", *HOLD, str(script)], capture_output=True, text=True, check=True)
    job = p.stdout.strip().split(";")[0]
    while not pending(job):
        time.sleep(0.005)
    return time.perf_counter() - t0, job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "profiles.yaml").write_text("bench: {partition: debug, containers: false, sbatch: {hold: true}}\n")
        env = {**os.environ, "JOBS_PROFILES": str(tmp / "profiles.yaml"),
               "JOBS_RECIPES": str(ROOT / "tests/fixtures/recipes"),
               "PYTHONPATH": str(ROOT / "tests/fixtures")}
        ours, plain, jobs = [], [], []
        for i in range(args.repeats):
            seconds, job = time_ours(tmp / "store", env)
            ours.append(seconds)
            jobs.append(job)
            # The same script our submission produced, submitted by hand.
            script = next((tmp / "store" / "runs").glob(f"*/logs/{job}_submission.sh"))
            seconds, job = time_sbatch(script)
            plain.append(seconds)
            jobs.append(job)
        subprocess.run(["scancel", *jobs], check=False)
    print("| submit path | median s | best s | n |\n|---|---|---|---|")
    print(f"| jobs submit --executor slurm | {statistics.median(ours):.3f} | {min(ours):.3f} | {len(ours)} |")
    print(f"| sbatch (same script) | {statistics.median(plain):.3f} | {min(plain):.3f} | {len(plain)} |")
    print(f"\noverhead: {statistics.median(ours) - statistics.median(plain):+.3f} s median "
          f"(goal: at most +1 s); ratio {statistics.median(ours) / statistics.median(plain):.1f}x")


if __name__ == "__main__":
    main()
