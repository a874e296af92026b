"""The Slurm executor against the real dev cluster: submit, chains, failures, preemption, ranks."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store

pytestmark = pytest.mark.slurm
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def env(tmp_path, slurm_cluster) -> dict:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false}\n"
                        "nopart: {partition: nosuch, containers: false}\n"
                        "toolong: {partition: debug, containers: false, time: '30-00:00:00'}\n"
                        "pyxis: {partition: debug}\n")
    return {"JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def submit(store: Path, env: dict, *args: str) -> list[str]:
    r = run_jobs(store, "submit", *args, "--executor", "slurm", "--profile", "dev", env=env)
    assert r.code == 0, r.err
    return [line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line]


#: A `jobs status` is a Python start-up and Slurm queries (~0.3 s of CPU); reading the record that the
#: job itself writes is a few milliseconds.
STATUS_EVERY = 4


def wait(store: Path, run_id: str, states: set[str], deadline_s: float = 180, env: dict | None = None):
    """Poll the record every second, and every STATUS_EVERY-th time through `jobs status` (which records
    what only Slurm saw, in a process of its own), until the run reaches one of `states`; the view
    returned is read after a `jobs status`."""
    end = time.monotonic() + deadline_s
    polls = 0
    while time.monotonic() < end:
        if polls % STATUS_EVERY == 0 or Store(store).run(run_id).state in states:
            run_jobs(store, "status", run_id, env=env)
            view = Store(store).run(run_id)
            if view.state in states:
                return view
        polls += 1
        time.sleep(1)
    raise AssertionError(f"run {run_id} still {Store(store).run(run_id).state} after {deadline_s} s")


def job_of(store: Path, run_id: str) -> str:
    return Store(store).run(run_id).jobs[-1]["job_id"]


def test_data_stage_runs_through_submitit_on_slurm(tmp_path, env, monkeypatch):
    from jobs import profiles
    from jobs.executors.slurm import python_for, render, sbatch_params

    store = tmp_path / "store"
    (run,) = submit(store, env, "tiny", "--stage", "data")
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, env=env)
    assert view.state == "SUCCEEDED", view.reason
    job = job_of(store, run)
    # The script submitit submitted is the one the executor renders itself (what the dry run shows and
    # `sbatch --test-only` checks), byte for byte: the same parameters, the same job command.
    folder = Path(view.jobs[-1]["folder"])
    submitted = (folder / f"{job}_submission.sh").read_text()
    here = re.search(r" (\S+) -u -m runtime\.hold_usr2 ", submitted).group(1)
    monkeypatch.setenv("JOBS_PROFILES", env["JOBS_PROFILES"])
    assert render(sbatch_params(view.spec, profiles.load("dev"), store, None), folder, python_for(None, here=here)) \
        == submitted
    assert view.attempts[0]["job_id"] == job and view.spec["executor"] == "slurm"
    assert len(view.outputs) == 6
    # slurmdbd learns of the end a little after the job's own record: poll, on a deadline.
    deadline, state = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        sacct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,ExitCode"], capture_output=True, text=True)
        state = sacct.stdout.split()[0] if sacct.stdout.split() else ""
        if state == "COMPLETED|0:0":
            break
        time.sleep(0.5)
    assert state == "COMPLETED|0:0"
    st = run_jobs(store, "status", run, env=env)
    assert "SUCCEEDED" in st.out and job in st.out
    logs = run_jobs(store, "logs", run, env=env)
    assert logs.code == 0 and "Job completed successfully" in logs.out


def test_chain_resolves_inputs_from_upstream_when_it_starts(tmp_path, env):
    store = tmp_path / "store"
    # An older count result exists: a dependent resolving `:latest` at submit time would take it.
    assert run_jobs(store, "submit", "testchain", "--stage", "count", "count.steps=3", env=env).code == 0
    count, double = submit(store, env, "testchain", "--stage", "count,double", "count.steps=6")
    s = Store(store)
    assert "afterok:" + job_of(store, count) == s.run(double).jobs[-1]["dependency"]
    view = wait(store, double, {"SUCCEEDED", "FAILED", "CANCELLED"}, env=env)
    assert view.state == "SUCCEEDED", view.reason
    assert view.inputs["numbers"] == s.run(count).outputs["result"]
    out = json.loads((Path(s.artifact(view.outputs["result"])["path"]) / "result.json").read_text())
    assert out["steps"] == 12


def test_failed_upstream_cancels_dependents_with_a_reason(tmp_path, env):
    store = tmp_path / "store"
    count, double = submit(store, env, "testchain", "--stage", "count,double", "count.fail=true")
    assert wait(store, count, {"FAILED", "SUCCEEDED"}, env=env).state == "FAILED"
    view = wait(store, double, {"CANCELLED", "FAILED", "SUCCEEDED"}, deadline_s=90, env=env)
    assert view.state == "CANCELLED"
    assert count in view.reason and "did not succeed" in view.reason
    shown = run_jobs(store, "show", double, env=env)
    assert "CANCELLED" in shown.out and count in shown.out


def test_dry_run_prints_scripts_and_records_nothing(tmp_path, env):
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count,double", "--executor", "slurm",
                 "--profile", "dev", "--dry-run", env=env)
    assert r.code == 0, r.err
    assert r.out.count("#!/bin/bash") == 2 and "#SBATCH --dependency=afterok:<job count>" in r.out.replace("'", "")
    assert "#SBATCH --partition=debug" in r.out
    assert not store.exists()


def counter_artifact_uninterrupted(tmp_path: Path, env: dict, steps: int) -> str:
    other = tmp_path / "uninterrupted"
    assert run_jobs(other, "submit", "testchain", "--stage", "count", f"count.steps={steps}", "count.step_s=0.01",
                    env=env).code == 0
    s = Store(other)
    return s.run(s.index().runs()[0]["id"]).outputs["result"]


def wait_for_progress(store: Path, run_id: str, steps: int, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    state = Store(store).run_dir(run_id) / "checkpoints" / "state.json"
    while time.monotonic() < end:
        if state.exists() and json.loads(state.read_text())["step"] >= steps:
            return
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} made no progress in {deadline_s} s")


def test_preemption_signal_checkpoints_requeues_and_resumes_same_run(tmp_path, env):
    store = tmp_path / "store"
    (run,) = submit(store, env, "testchain", "--stage", "count", "count.steps=20", "count.step_s=0.5")
    wait_for_progress(store, run, 4)
    job = job_of(store, run)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)   # what Slurm sends before the time limit
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=240, env=env)
    assert view.state == "SUCCEEDED", view.reason
    assert len(view.attempts) >= 2 and {a["job_id"] for a in view.attempts} == {job}
    assert view.attempts[0]["exit"] == "requeued" and view.attempts[-1]["exit"] == 0
    # Each attempt ran the batch script again, whose first line noted when (the entry comes after it).
    starts = [(a["batch_start"], a["start"]) for a in view.attempts]
    assert all(0 < entry - first < 30 for first, entry in starts), starts
    assert starts[1][0] > starts[0][1], starts
    progress = (Store(store).run_dir(run) / "progress.log").read_text().splitlines()
    assert progress[0].startswith("attempt 1 starts at step 0")
    assert int(progress[1].split("at step ")[1].split()[0]) >= 4   # resumed, not restarted
    assert view.outputs["result"] == counter_artifact_uninterrupted(tmp_path, env, 20)


def test_hard_requeue_resumes_from_the_last_checkpoint(tmp_path, env):
    store = tmp_path / "store"
    (run,) = submit(store, env, "testchain", "--stage", "count", "count.steps=16", "count.step_s=0.5")
    wait_for_progress(store, run, 4)
    job = job_of(store, run)
    subprocess.run(["scontrol", "requeue", job], check=True)         # preempted without warning
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=240, env=env)
    assert view.state == "SUCCEEDED", view.reason
    assert len(view.attempts) >= 2
    progress = (Store(store).run_dir(run) / "progress.log").read_text().splitlines()
    assert int(progress[-1].split("at step ")[1].split()[0]) >= 4
    assert view.outputs["result"] == counter_artifact_uninterrupted(tmp_path, env, 16)


def test_two_nodes_get_one_task_each_with_rank_world_and_master(tmp_path, env):
    store = tmp_path / "store"
    (run,) = submit(store, env, "testchain", "--stage", "ranks")
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, env=env)
    assert view.state == "SUCCEEDED", view.reason
    report = json.loads((Path(Store(store).artifact(view.outputs["ranks"])["path"]) / "ranks.json").read_text())
    assert report["world_size"] == 2 and report["sum"] == 3.0
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]
    assert report["ranks"][0]["nodes"] == ["node1", "node2"]
    # The allocation reaches the stage through its context: the recipe's cpus_per_task, Slurm's job ID.
    assert report["resources"] == {"cpus_per_task": 1, "gpus_per_node": 0, "job_id": view.attempts[0]["job_id"]}


def test_cancel_a_running_slurm_run(tmp_path, env):
    store = tmp_path / "store"
    (run,) = submit(store, env, "testchain", "--stage", "count", "count.steps=200", "count.step_s=0.5")
    wait_for_progress(store, run, 1)
    r = run_jobs(store, "cancel", run[:12], env=env)
    assert r.code == 0 and "scancel" in r.out
    assert Store(store).run(run).state == "CANCELLED"
    job = job_of(store, run)
    end = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < end, "job still in squeue after scancel"
        time.sleep(1)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a second Unix user needs root (CI has it)")
def test_a_foreign_users_cancel_that_scancel_refuses_records_nothing(tmp_path, env):
    """Another member of a team store may write its records but not cancel the owner's Slurm job:
    scancel refuses, and the store keeps saying RUNNING (the owner's cancel then still works)."""
    from helpers import MATE, run_jobs_as, team_store, tree_state

    with team_store() as (top, store):
        (run,) = submit(store, env, "testchain", "--stage", "count", "count.steps=200", "count.step_s=0.5")
        wait_for_progress(store, run, 1)
        (top / "mate").mkdir()
        before = tree_state(store)
        p = run_jobs_as(MATE, store, "cancel", run, home=top / "mate")
        assert p.code == 2 and "Traceback" not in p.err, p.err
        assert p.err.startswith(f"jobs: error: run {run} not cancelled: scancel") and len(p.err.splitlines()) == 1
        assert "denied" in p.err and "nothing recorded" in p.err, p.err
        assert tree_state(store, skip=(store / "runs",)) == {k: v for k, v in before.items() if not k.startswith("runs")}
        assert Store(store).run(run).state == "RUNNING"
        r = run_jobs(store, "cancel", run, env=env)          # the owner's cancel is not "already ended"
        assert r.code == 0 and "scancel" in r.out, r.err
        assert Store(store).run(run).state == "CANCELLED"


def test_a_cluster_without_pyxis_refuses_a_pyxis_submit_before_anything_is_recorded(tmp_path, env):
    """The dev cluster has no pyxis: a profile that runs the stage's image under it (the default) is
    refused at submit, not accepted to die in the queue with `srun: unrecognized option`."""
    store = tmp_path / "store"
    lock = {"JOBS_CONTAINERS_LOCK": "/var/lib/jobs-dev/containers.lock"}   # tiny-cpu pinned (dev set-up)
    for args in ([], ["--profile", "pyxis"]):
        r = run_jobs(store, "submit", "tiny", "--stage", "data", "--executor", "slurm", *args, env={**env, **lock})
        assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
        assert "srun has no --container-image (pyxis is not installed)" in r.err, r.err
        assert not store.exists()


BAD = [
    (["--profile", "nopart"], "refused tiny/data under profile nopart (partition nosuch): "),   # + slurm's words
    (["--profile", "toolong"], "time limit"),
    (["--profile", "nosuch"], "no profile 'nosuch'"),
    (["--profile", "pyxis"], "not pinned by digest"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[a[1] for a, _ in BAD])
def test_bad_slurm_input_is_refused_before_recording(tmp_path, env, args, message):
    store = tmp_path / "store"
    assert run_jobs(store, "submit", "tiny", "--stage", "data", "data.n_sft=10", env=env).code == 0
    before = tree_digest(store)
    r = run_jobs(store, "submit", "tiny", "--stage", "data", "--executor", "slurm", *args, env=env)
    assert r.code == 2 and message in r.err.lower() if message.islower() else message in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert tree_digest(store) == before


def test_override_values_stay_strings_on_slurm(tmp_path, env):
    store = tmp_path / "store"
    marker = tmp_path / "owned"
    (run,) = submit(store, env, "testchain", "--stage", "count", f"+count.note='$(touch {marker})'", "count.steps=1")
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, env=env)
    assert view.state == "SUCCEEDED" and view.spec["config"]["count"]["note"] == f"$(touch {marker})"
    assert not marker.exists()
