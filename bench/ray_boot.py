"""Time from a Slurm job's start to Ray ready over its allocation, for 1 and 2 nodes (dev cluster).

A `ray: true` stage (tests/fixtures raytest/probe) is submitted through `jobs submit --executor slurm`;
"Ray ready" is when the stage's run() starts: the entry calls it once every node is alive in Ray.
Two clocks: from the job's start in Slurm (sacct Start, whole seconds) and from the entry's attempt
record (rank 0's Python is up, Ray not yet started). Jobs run one after another.

    .venv/bin/python bench/ray_boot.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
JOBS = str(Path(sys.executable).parent / "jobs")
sys.path.insert(0, str(ROOT))

from lineage import Store  # noqa: E402


def jobs(store: Path, env: dict, *args: str) -> str:
    p = subprocess.run([JOBS, "--store", str(store), *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"jobs {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stdout


def slurm_start(job: str) -> float:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "Start"], capture_output=True, text=True).stdout
    return datetime.datetime.fromisoformat(out.split()[-1]).timestamp()


def one(store: Path, env: dict, profile: str, deadline_s: float = 300) -> tuple[float, float]:
    out = jobs(store, env, "submit", "raytest", "--stage", "probe", "--executor", "slurm", "--profile", profile,
               "--force")
    run = next(line.split()[0] for line in out.splitlines() if "submitted as Slurm job" in line)
    end = time.monotonic() + deadline_s
    while (view := Store(store).run(run)).state not in ("SUCCEEDED", "FAILED"):
        if time.monotonic() > end:
            raise SystemExit(f"run {run} not done after {deadline_s} s")
        jobs(store, env, "status", run)
        time.sleep(1)
    if view.state != "SUCCEEDED":
        raise SystemExit(f"run {run} failed: {view.reason}")
    report = json.loads((Path(Store(store).artifact(view.outputs["report"])["path"]) / "report.json").read_text())
    ready = report["started"]
    return ready - slurm_start(view.jobs[-1]["job_id"]), ready - view.attempts[-1]["start"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    subprocess.run(["bash", str(ROOT / "dev" / "slurm" / "up.sh")], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles.yaml"
        profiles.write_text("one: {partition: debug, containers: false, nodes: 1}\n"
                            "two: {partition: debug, containers: false, nodes: 2}\n")
        env = {**os.environ, "JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(FIXTURES / "recipes"),
               "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
        print("| nodes | job start -> Ray ready, s (median) | entry -> Ray ready, s (median) | all entry -> ready, s |")
        print("|---:|---:|---:|---|")
        for nodes, profile in ((1, "one"), (2, "two")):
            times = [one(Path(tmp) / "store", env, profile) for _ in range(args.repeats)]
            from_job, from_entry = zip(*times)
            print(f"| {nodes} | {statistics.median(from_job):.1f} | {statistics.median(from_entry):.1f} | "
                  + ", ".join(f"{t:.1f}" for t in from_entry) + " |", flush=True)


if __name__ == "__main__":
    main()
