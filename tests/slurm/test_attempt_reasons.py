"""Why each attempt of a Slurm run ended, as `jobs show` tells it: Slurm's USR2 before the time limit
("time limit"), and a requeue without warning (the attempt that never recorded its end is closed by
the next one with the state sacct kept for it), each with its failure class."""
import subprocess

import pytest

from helpers import run_jobs
from lineage import Store
from test_executor import env as env  # noqa: F401  (fixture: profiles and the fixture recipes)
from test_executor import job_of, submit, wait, wait_for_progress

pytestmark = pytest.mark.slurm


def attempt_lines(store, run: str, env: dict) -> list[str]:
    shown = run_jobs(store, "show", run, env=env)
    assert shown.code == 0, shown.err
    return [line for line in shown.out.splitlines() if line.startswith("attempt")]


def test_usr2_before_the_time_limit_is_recorded_as_time_limit(tmp_path, env):
    store = tmp_path / "store"
    profiles = tmp_path / "short.yaml"
    profiles.write_text("dev: {partition: debug, containers: false, time: '00:02:00'}\n")
    # A 2-minute job gets USR2 90 s (Slurm: up to 60 s more) before its end; the count needs longer.
    (run,) = submit(store, {**env, "JOBS_PROFILES": str(profiles)}, "testchain", "--stage", "count",
                    "count.steps=90", "count.step_s=0.5")
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=420, env=env)
    assert view.state == "SUCCEEDED", view.reason
    assert len(view.attempts) >= 2 and view.attempts[0]["exit"] == "requeued"
    assert view.attempts[0]["reason"].startswith("time limit (") and view.attempts[-1]["exit"] == 0
    lines = attempt_lines(store, run, env)
    assert lines[0] == f"attempts  {len(view.attempts)}"
    assert view.attempts[0]["failure_class"] == "time_limit"   # within the default budget: requeued
    assert "exit requeued  class time_limit  (time limit (" in lines[1]


def test_requeue_without_warning_is_closed_by_the_next_attempt_with_sacct_state(tmp_path, env):
    store = tmp_path / "store"
    (run,) = submit(store, env, "testchain", "--stage", "count", "count.steps=16", "count.step_s=0.5")
    wait_for_progress(store, run, 3)
    job = job_of(store, run)
    subprocess.run(["scontrol", "requeue", job], check=True)
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=240, env=env)
    assert view.state == "SUCCEEDED", view.reason
    first = Store(store).run(run).attempts[0]
    assert first["exit"] == "interrupted" and first["reason"] == "requeued (scontrol requeue)", first
    assert first["failure_class"] == "preempted" and first["slurm"]["State"] == "REQUEUED", first
    assert "exit interrupted  class preempted  (requeued (scontrol requeue))" in attempt_lines(store, run, env)[1]
    assert "attempts: #1 preempted" in run_jobs(store, "status", run, env=env).out
