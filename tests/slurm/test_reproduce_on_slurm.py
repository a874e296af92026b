"""`jobs reproduce` of a Slurm run: re-run on Slurm through the one submit path, from the record alone,
and compared bit for bit; an image that moved since the run is refused, or run and recorded as drift."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store
from test_executor import wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SMALL = ["pretrain.steps=20", "pretrain.log_every=5", "pretrain.warmup=5", "pretrain.checkpoint_every=100",
         "tracking.wandb=disabled", "tracking.tensorboard=false"]
IMAGE_A = "jobs/tiny-cpu@sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


@pytest.fixture
def env(tmp_path, slurm_cluster) -> dict:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false}\n")
    return {"JOBS_PROFILES": str(profiles)}


def submitted(out: str) -> str:
    (run,) = [line.split()[0] for line in out.splitlines() if "submitted as Slurm job" in line]
    return run


def slurm_run(store: Path, env: dict, *args: str) -> str:
    r = run_jobs(store, "submit", "tiny", *args, "--executor", "slurm", "--profile", "dev", env=env)
    assert r.code == 0, r.err
    run = submitted(r.out)
    view = wait(store, run, {"SUCCEEDED", "FAILED", "CANCELLED"}, deadline_s=600, env=env)
    assert view.state == "SUCCEEDED", view.reason
    return run


def the_reproduction(store: Path, of: str) -> str:
    (new,) = [r["id"] for r in Store(store).index().runs() if Store(store).run(r["id"]).spec.get("reproduces") == of]
    return new


def test_a_slurm_pretrain_is_reproduced_on_slurm_bit_for_bit(data_store, tmp_path, env):
    store = tmp_path / "store"
    shutil.copytree(data_store, store, symlinks=True)
    run = slurm_run(store, env, "--stage", "pretrain", *SMALL)
    # Today's recipe files are not read: the plan comes from the record (a broken `tiny` shadows the real one).
    shadow = tmp_path / "recipes" / "tiny"
    shadow.mkdir(parents=True)
    (shadow / "recipe.yaml").write_text("name: tiny\nstages: nonsense\n")
    r = run_jobs(store, "reproduce", run[:13], env={**env, "JOBS_RECIPES": str(shadow.parent)}, timeout=900)
    assert r.code == 0, r.out + r.err
    assert "reproduced bit for bit" in r.out and "submitted as Slurm job" in r.out

    s = Store(store)
    old, new = s.run(run), s.run(the_reproduction(store, run))
    assert new.spec["executor"] == "slurm" and new.spec["profile"] == "dev"
    assert new.jobs[-1]["executor"] == "slurm" and new.jobs[-1]["job_id"] != old.jobs[-1]["job_id"]
    assert new.attempts[0]["job_id"] == new.jobs[-1]["job_id"]           # it ran as that Slurm job
    assert new.spec["config"] == old.spec["config"] and new.inputs == old.inputs
    assert new.spec["code"]["snapshot"] == old.spec["code"]["snapshot"]
    assert new.spec["code"]["root"] == s.artifact(old.spec["code"]["snapshot"])["path"]
    assert new.outputs == old.outputs and "env_drift" not in new.spec
    d = run_jobs(store, "diff", run, new.id)
    assert d.code == 0 and d.out.strip() == "no differences in config, code, environment, inputs or outputs"


def rewrite_record(store: Path, run: str, **fields) -> None:
    """Make a run's record say what another machine's would (the way a store moved between sites differs)."""
    path = next((Store(store).records / "run").rglob(f"{run}.json"))
    spec = json.loads(path.read_text())
    spec.update(fields)
    os.chmod(path, 0o644)
    path.write_text(json.dumps(spec))
    os.chmod(path, 0o444)


def test_an_image_that_moved_is_refused_then_run_with_the_drift_recorded(tmp_path, env):
    store = tmp_path / "store"
    run = slurm_run(store, env, "--stage", "data")
    # The record says the run ran in IMAGE_A on profile `boxed`; since then the lock pins another digest.
    rewrite_record(store, run, container_image=IMAGE_A, profile="boxed")
    lock = tmp_path / "containers.lock"
    lock.write_text(f"tiny-cpu:\n  image: jobs/tiny-cpu:0.1\n  digest: {DIGEST_B}\n")
    profiles = Path(env["JOBS_PROFILES"])
    profiles.write_text("boxed: {partition: debug}\n")
    env = {**env, "JOBS_CONTAINERS_LOCK": str(lock)}
    before = tree_digest(store)
    r = run_jobs(store, "reproduce", run, env=env)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.out + r.err
    assert (f"the recorded image {IMAGE_A} is no longer the pin of 'tiny-cpu' (containers.lock pins "
            f"jobs/tiny-cpu@{DIGEST_B})") in r.err and "--allow-env-drift" in r.err
    assert tree_digest(store) == before                                  # nothing recorded

    # The site now runs the profile without containers: refused too, then allowed and recorded.
    profiles.write_text("boxed: {partition: debug, containers: false}\n")
    r = run_jobs(store, "reproduce", run, env=env)
    assert r.code == 2 and f"the run ran in {IMAGE_A}, but profile 'boxed' now runs without containers" in r.err
    assert tree_digest(store) == before
    r = run_jobs(store, "reproduce", run, "--allow-env-drift", "--no-wait", env=env)
    assert r.code == 0, r.out + r.err
    assert "environment drift (allowed)" in r.out and "reproduced" not in r.out
    new_id = the_reproduction(store, run)
    assert f"jobs reproduce --compare {new_id}" in r.out
    assert wait(store, new_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, deadline_s=600, env=env).state == "SUCCEEDED"
    r = run_jobs(store, "reproduce", "--compare", new_id[:13], env=env)
    assert r.code == 0 and f"reproduced bit for bit: {new_id} has the same outputs as {run}" in r.out, r.out + r.err
    assert run_jobs(store, "reproduce", "--compare", run, env=env).code == 2   # not a reproduction: one line
    new = Store(store).run(new_id)
    assert new.spec["executor"] == "slurm" and new.spec["container_image"] is None
    assert new.spec["env_drift"] == {"container_image": {"recorded": IMAGE_A, "ran": None}}
    d = run_jobs(store, "diff", run, new.id)
    assert d.code == 1 and d.out.splitlines() == [f"env     image {IMAGE_A} -> None"]
