"""This project's Ray start-up with the Ray the NVIDIA images carry (2.49.2 in both locks), in the
nemo-rl image's CPU twin: a head and a worker come up, run tasks, and end."""
from __future__ import annotations

import json
import os

from helpers import ray_pids
from twin import LOCK, require, run

require()


def test_a_head_and_a_worker_start_run_tasks_and_end_with_the_images_ray(tmp_path):
    import tomllib

    (want,) = {p["version"] for p in tomllib.loads(LOCK.read_text())["package"] if p["name"] == "ray"}
    job = f"7{os.getpid()}"
    r = run(["tests/twins/ray_boot.py", str(tmp_path)], env={"SLURM_JOB_ID": job, "JOBS_RAY_READY_TIMEOUT_S": "90"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"ray": want, "alive": ["twin-a", "twin-b"], "tasks_ran": 2, "worker_exit": 0}
    assert not ray_pids(f"/tmp/ray-{job}-")
