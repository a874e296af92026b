"""Live views of Slurm runs: `jobs status` of a job that cannot start yet (squeue's reason and
expected start, in words), and `jobs logs -f` following a run across a requeue."""
from __future__ import annotations

import json
import os
import subprocess
import threading
from datetime import datetime
from pathlib import Path

import pytest

from helpers import JOBS, run_jobs
from lineage import Store

pytestmark = pytest.mark.slurm
FIXTURES = Path(__file__).parents[1] / "fixtures"


def environment(tmp_path: Path) -> dict:
    profiles = tmp_path / "profiles.yaml"
    # later: --begin an hour from now, so the job is held by its begin time whatever the nodes do.
    profiles.write_text("dev: {partition: debug, containers: false}\n"
                        "later: {partition: debug, containers: false, sbatch: {begin: now+1hour}}\n")
    return {"JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def test_status_of_a_pending_job_says_why_and_when_it_may_start(tmp_path, slurm_cluster):
    env = environment(tmp_path)
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count", "--executor", "slurm", "--profile", "later", env=env)
    assert r.code == 0, r.err
    (run,) = [line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line]
    job = Store(store).run(run).jobs[-1]["job_id"]
    try:
        squeue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T|%r|%S"], capture_output=True, text=True,
                                check=True).stdout.strip()
        state, reason, start = squeue.split("|")
        assert (state, reason) == ("PENDING", "BeginTime"), squeue
        assert (datetime.fromisoformat(start) - datetime.now()).total_seconds() > 50 * 60

        st = run_jobs(store, "status", env=env)
        assert st.code == 0, st.err
        (line,) = [x for x in st.out.splitlines() if x.startswith(run)]
        assert f"{job} PENDING" in line and " QUEUED " in line
        assert line.endswith(f"BeginTime (its --begin time has not come); expected start {start}"), st.out
        assert Store(store).run(run).state == "QUEUED"   # pending is not an end: nothing recorded
    finally:
        run_jobs(store, "cancel", run, env=env)
    slurm_cluster.final_state(job)
    st = run_jobs(store, "status", run, "--all", env=env)
    assert "CANCELLED" in st.out and "expected start" not in st.out


def test_logs_follow_the_current_attempt_across_a_requeue(tmp_path, slurm_cluster):
    env = environment(tmp_path)
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count", "count.steps=30", "count.step_s=0.5",
                 "--executor", "slurm", "--profile", "dev", env=env)
    assert r.code == 0, r.err
    (run,) = [line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line]
    job = Store(store).run(run).jobs[-1]["job_id"]
    state = Store(store).run_dir(run) / "checkpoints" / "state.json"
    slurm_cluster.wait_until("4 counted steps", lambda: state.exists() and json.loads(state.read_text())["step"] >= 4,
                             deadline_s=180)
    follower = subprocess.Popen([JOBS, "--store", str(store), "logs", "-f", run], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env={**os.environ, **env})
    watchdog = threading.Timer(300, follower.kill)
    watchdog.start()
    try:
        first = follower.stdout.readline()   # attempt 1 is running: its header comes first
        subprocess.run(["scancel", "--signal=USR2", job], check=True)   # what Slurm sends before preemption
        # The rest from the same buffered reader: communicate() reads the pipe's descriptor and would skip
        # what readline() had already buffered (a CI run under load lost attempt 1's first lines so).
        out = first + follower.stdout.read()   # -f returns when the run ends
        follower.wait()
    finally:
        watchdog.cancel()
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    view = Store(store).run(run)
    assert view.state == "SUCCEEDED" and len(view.attempts) == 2, (view.state, view.attempts)
    headers = [line for line in out.splitlines() if line.startswith("==> run ")]
    assert headers == [f"==> run {run} attempt {n}, job {job}: {Store(store).run_dir(run) / 'logs'} <==" for n in (1, 2)], out
    # Each attempt's output once (Slurm truncates a requeued job's files; nothing is printed twice).
    assert out.count("Starting with JobEnvironment") == 2 and out.count("Job completed successfully") == 1, out
    assert out.index(headers[1]) < out.index("Job completed successfully")
