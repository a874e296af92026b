"""A sweep on the dev cluster: a 2x3 grid of tiny's SFT is one sbatch job array with `%2`, six run
records with their configs; a re-submit runs only the point that was cancelled, the next runs
nothing; `compare` shows six rows and marks the best. Step counts are tiny: this is plumbing, not
learning (tests/stages has the learning)."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from devcluster import sh
from helpers import run_jobs
from lineage import Store
from lineage import sweeps as records

pytestmark = pytest.mark.slurm
GRID = ["--sweep", "sft.lr=1e-3,3e-3", "--sweep", "sft.steps=2,3,4", "sft.warmup=1", "sft.log_every=1",
        "tracking.wandb=disabled", "tracking.tensorboard=false", "--executor", "slurm", "--profile", "dev",
        "--max-parallel", "2"]


def wait_sweep(store: Path, sweep: str, env: dict, deadline_s: float = 600) -> list[str]:
    """Poll `jobs status SWEEP` (it records ends only Slurm saw) until no point is queued or running."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        r = run_jobs(store, "status", sweep, env=env)
        assert r.code == 0, r.err
        view = records.read(Store(store), sweep)
        states = [Store(store).run(run).state for run in view.runs]
        if not {"QUEUED", "RUNNING"} & set(states):
            return states
        time.sleep(2)
    raise AssertionError(f"sweep {sweep} not ended after {deadline_s} s: {states}")


def test_a_2x3_sft_sweep_is_one_job_array_and_a_resubmit_runs_only_what_is_missing(upstream_store, tmp_path,
                                                                                     slurm_cluster):
    store = upstream_store
    (tmp_path / "profiles.yaml").write_text("dev: {partition: debug, containers: false}\n")
    env = {"JOBS_PROFILES": str(tmp_path / "profiles.yaml")}
    r = run_jobs(store, "submit", "tiny", "--stage", "sft", *GRID, env=env)
    assert r.code == 0, r.err
    sweep = re.search(r"sweep (swp_[0-9a-f]{16}): 6 point\(s\), 6 to run", r.out)[1]
    array = re.search(r"submitted as Slurm array job (\d+) %2", r.out)[1]
    view = records.read(Store(store), sweep)
    # Cancel the last point while the %2 limit still holds it back.
    assert run_jobs(store, "cancel", view.runs[5], env=env).code == 0
    early = run_jobs(store, "submit", "tiny", "--stage", "rm", "--input", f"model={sweep}:best", "--dry-run", env=env)
    assert early.code == 2 and "not ended yet" in early.err   # the best so far is not the sweep's best

    # One sbatch: one submission script, an array of six tasks at most two at a time.
    folder = store / "sweeps" / sweep
    (script,) = folder.glob("*_submission.sh")
    assert "#SBATCH --array=0-5%2" in script.read_text()
    assert slurm_cluster.job_field(f"{array}_0", "ArrayTaskThrottle") == "2"
    assert wait_sweep(store, sweep, env) == ["SUCCEEDED"] * 5 + ["CANCELLED"]
    tasks = sh("sacct", "-n", "-X", "-P", "-j", array, "-o", "JobID").split()
    assert {f"{array}_{i}" for i in range(5)} <= set(tasks)   # the cancelled task never started

    s = Store(store)
    runs = [s.run(run) for run in view.runs]
    assert [(r.spec["config"]["sft"]["lr"], r.spec["config"]["sft"]["steps"]) for r in runs] == [
        (lr, steps) for lr in (1e-3, 3e-3) for steps in (2, 3, 4)]
    assert {r.spec["sweep"]["id"] for r in runs} == {sweep}
    assert [r.jobs[-1]["job_id"] for r in runs] == [f"{array}_{i}" for i in range(6)]
    assert len({r.spec["run_key"] for r in runs}) == 6 and len({r.outputs["model"] for r in runs[:5]}) == 5
    assert len({tuple(sorted(r.inputs.items())) for r in runs}) == 1      # inputs resolved once for all points

    # The re-submit runs only the cancelled point; the one after that runs nothing.
    again = run_jobs(store, "submit", "tiny", "--stage", "sft", *GRID, env=env)
    assert again.code == 0, again.err
    assert f"sweep {sweep}: 6 point(s), 1 to run" in again.out and again.out.count(" reused: ") == 5
    redo = records.read(s, sweep).runs
    assert redo[:5] == view.runs[:5] and redo[5] != view.runs[5]
    assert s.run(redo[5]).spec["config"]["sft"] == runs[5].spec["config"]["sft"]
    assert wait_sweep(store, sweep, env) == ["SUCCEEDED"] * 6
    before = len(s.index().runs())
    third = run_jobs(store, "submit", "tiny", "--stage", "sft", *GRID, env=env)
    assert third.code == 0 and f"sweep {sweep}: 6 point(s), 0 to run" in third.out and "submitted" not in third.out
    assert len(s.index().runs()) == before

    r = run_jobs(store, "compare", sweep, env=env)
    assert r.code == 0, r.err
    rows = [line for line in r.out.splitlines() if re.match(r"^[* ]  +\d+  ", line)]
    assert len(rows) == 6 and sum(line.startswith("*") for line in rows) == 1
    final = [s.run(run) for run in records.read(s, sweep).runs]
    best = min(range(6), key=lambda i: final[i].metrics["sft/loss"])
    assert rows[best].startswith("*") and final[best].id in rows[best]
    # A later stage takes the best point's model.
    plan = run_jobs(store, "submit", "tiny", "--stage", "rm", "--input", f"model={sweep}:best", "--dry-run", env=env)
    assert plan.code == 0 and f"input  model      {final[best].outputs['model']}" in plan.out, plan.err


@pytest.mark.skipif(os.geteuid() != 0, reason="making a second Unix user needs root (CI has it)")
def test_a_sweeps_cancel_scancels_its_array_before_recording_any_point(tmp_path, slurm_cluster):
    """A team member's cancel of the owner's sweep: scancel refuses, nothing is recorded; the
    owner's cancel then scancels the array and records every point."""
    import pwd
    import subprocess

    from helpers import MATE, run_jobs_as, team_store, tree_state

    fixtures = Path(__file__).parents[1] / "fixtures"
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false}\n")
    env = {"JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(fixtures / "recipes"),
           "PYTHONPATH": os.pathsep.join([str(fixtures), os.environ.get("PYTHONPATH", "")])}
    with team_store() as (top, store):
        r = run_jobs(store, "submit", "testchain", "--stage", "count", "--sweep", "count.steps=300,301",
                     "count.step_s=0.5", "--executor", "slurm", "--profile", "dev", env=env)
        assert r.code == 0, r.err
        sweep = re.search(r"sweep (swp_[0-9a-f]+):", r.out)[1]
        view = records.read(Store(store), sweep)
        array = Store(store).run(view.runs[0]).jobs[-1]["array"]
        (top / "mate").mkdir()
        # The points' own jobs add events as they start (attempt, RUNNING): those are not the refused
        # cancel's; what the mate could have written would be a file of theirs, or a CANCELLED point.
        quiet = (store / "runs", store / "sweeps", store / "records" / "event")
        before = tree_state(store, skip=quiet)
        refused = run_jobs_as(MATE, store, "cancel", sweep, home=top / "mate")
        assert refused.code == 2 and len(refused.err.splitlines()) == 1 and "Traceback" not in refused.err, refused.err
        assert f"not cancelled: scancel {array} said" in refused.err and "denied" in refused.err, refused.err
        assert tree_state(store, skip=quiet) == before
        assert not [p for p in store.rglob("*") if p.stat().st_uid == pwd.getpwnam(MATE).pw_uid]
        assert "CANCELLED" not in [Store(store).run(run).state for run in view.runs]
        c = run_jobs(store, "cancel", sweep, env=env)
        assert c.code == 0 and f"scancel {array}" in c.out, c.out + c.err
        assert [Store(store).run(run).state for run in view.runs] == ["CANCELLED", "CANCELLED"]
        end = time.monotonic() + 60
        while subprocess.run(["squeue", "-h", "-r", "-j", array], capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < end, "the array is still in squeue after the sweep's cancel"
            time.sleep(1)


def test_planning_with_a_sweeps_best_point_reads_records_only(tmp_path, slurm_cluster):
    """`--input ROLE=SWEEP:best` is resolved from the points' records: a dry run asks Slurm nothing
    and leaves the store byte for byte as it was, even when Slurm knows more than the records (the
    array was scancelled behind the store's back); `jobs status SWEEP` is what asks."""
    import shutil
    import subprocess

    from helpers import tree_digest

    fixtures = Path(__file__).parents[1] / "fixtures"
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false, sbatch: {hold: true}}\n")
    env = {"JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(fixtures / "recipes"),
           "PYTHONPATH": os.pathsep.join([str(fixtures), os.environ.get("PYTHONPATH", "")])}
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count", "--sweep", "count.steps=1,2", "count.step_s=0",
                 "--executor", "slurm", "--profile", "dev", env=env)
    assert r.code == 0, r.err
    sweep = re.search(r"sweep (swp_[0-9a-f]+):", r.out)[1]
    view = records.read(Store(store), sweep)
    array = Store(store).run(view.runs[0]).jobs[-1]["array"]
    subprocess.run(["scancel", array], check=True)
    end = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-r", "-j", array], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < end, "the array is still in squeue after scancel"
        time.sleep(1)

    # Every Slurm command the planning could run, each a wrapper that notes its name and runs the real one.
    bin_, log = tmp_path / "bin", tmp_path / "slurm-calls"
    bin_.mkdir()
    for name in ("squeue", "sacct", "sbatch", "scontrol", "scancel", "sinfo", "srun"):
        real = shutil.which(name)
        (bin_ / name).write_text(f'#!/bin/sh\necho {name} "$@" >> {log}\nexec {real} "$@"\n')
        (bin_ / name).chmod(0o755)
    watched = {**env, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    plan = ["submit", "testchain", "--stage", "double", "--input", f"numbers={sweep}:best", "--executor", "slurm",
            "--profile", "dev", "--dry-run"]
    before = tree_digest(store)
    early = run_jobs(store, *plan, env=watched)
    assert early.code == 2 and "2 point(s) not ended yet" in early.err, early.err
    assert tree_digest(store) == before and not log.exists(), log.read_text() if log.exists() else ""
    assert run_jobs(store, "status", sweep, env=watched).code == 0   # the status command is the one that asks
    assert {"squeue", "sacct"} & {line.split()[0] for line in log.read_text().splitlines()}
