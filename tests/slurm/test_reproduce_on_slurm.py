"""`jobs reproduce` of a Slurm run: re-run on Slurm through the one submit path, from the record alone,
in the image digest it ran in, and compared bit for bit; an image that moved since the run is refused
in one line, or run and recorded as drift."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store
from test_containers_on_slurm import dev_image, write_profiles  # noqa: F401 (a fixture)
from test_executor import wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SMALL = ["pretrain.steps=20", "pretrain.log_every=5", "pretrain.warmup=5", "pretrain.checkpoint_every=100",
         "tracking.wandb=disabled", "tracking.tensorboard=false"]


@pytest.fixture
def env(tmp_path, slurm_cluster) -> dict:
    profiles = tmp_path / "profiles.yaml"
    # The profile pins torch's CPU kernels (AVX2, below this host's best where it has AVX512): the jobs
    # run them, the records say so, and a reproduction on the same profile runs them again.
    profiles.write_text("dev: {partition: debug, containers: false, cpu_kernels: avx2}\n")
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
    assert old.spec.environment["cpu_kernels"] == new.spec.environment["cpu_kernels"] == "avx2"
    assert old.attempts[0]["cpu_kernels"] == new.attempts[0]["cpu_kernels"] == "avx2"
    d = run_jobs(store, "diff", run, new.id)
    # the verdict, then at most the timings that moved (a speed is not a difference)
    assert d.code == 0 and d.out.splitlines()[0] == "no differences in config, code, environment, inputs, outputs or metrics"
    assert all("(timing: not counted)" in line for line in d.out.splitlines()[1:]), d.out


def test_a_run_in_the_image_is_reproduced_in_its_digest_and_a_moved_pin_is_refused(tmp_path, dev_image, slurm_cluster):
    image, squashfs = dev_image
    env = write_profiles(tmp_path)
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "tiny", "--stage", "data", "--executor", "slurm", "--profile", "ch", env=env)
    assert r.code == 0, r.out + r.err
    run = submitted(r.out)
    assert wait(store, run, {"SUCCEEDED", "FAILED", "CANCELLED"}, deadline_s=600, env=env).state == "SUCCEEDED"

    # Reproduced on Slurm, in the recorded digest, bit for bit.
    r = run_jobs(store, "reproduce", run, env=env, timeout=900)
    assert r.code == 0 and "reproduced bit for bit" in r.out, r.out + r.err
    s = Store(store)
    old, new = s.run(run), s.run(the_reproduction(store, run))
    assert old.spec["container_image"] == new.spec["container_image"] == image.reference
    assert [a["image"] for a in new.attempts] == [image.reference]            # the job says it ran in it
    assert new.attempts[0]["python_executable"] == "/usr/bin/python3"         # the image's Python, not ours
    assert new.jobs[-1]["executor"] == "slurm" and new.outputs == old.outputs and "env_drift" not in new.spec
    assert new.spec["runtime_bundle"] == old.spec["runtime_bundle"]
    assert run_jobs(store, "diff", run, new.id, env=env).code == 0          # same image, bundle, code, config

    # The pin moves to another digest: refused in one line, before anything is recorded or imported.
    moved = image.digest[:-8] + "0badc0de"
    lock = tmp_path / "moved.lock"
    lock.write_text(f"tiny-cpu:\n  image: {image.image}\n  digest: {moved}\n")
    before, images_before = tree_digest(store), sorted(p.name for p in squashfs.parent.iterdir())
    r = run_jobs(store, "reproduce", run, env={**env, "JOBS_CONTAINERS_LOCK": str(lock)})
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.out + r.err
    assert (f"the recorded image {image.reference} is no longer the pin of 'tiny-cpu' (containers.lock pins "
            f"{image.repository}@{moved})") in r.err and "--allow-env-drift" in r.err
    assert tree_digest(store) == before and sorted(p.name for p in squashfs.parent.iterdir()) == images_before
    # Allowed, the moved pin must still be importable: the registry has no such digest, so it is refused too.
    empty = tmp_path / "images"
    Path(env["JOBS_PROFILES"]).write_text(f"ch: {{partition: debug, cpus_per_task: 2, container_runtime: charliecloud, "
                                          f"container_dir: '{empty}'}}\n")
    r = run_jobs(store, "reproduce", run, "--allow-env-drift", env={**env, "JOBS_CONTAINERS_LOCK": str(lock)})
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "ch-image pull failed" in r.err, r.out + r.err
    assert tree_digest(store) == before and not list(empty.glob("*.sqsh"))

    # The profile now runs on the host: refused too; allowed, it runs there and the record holds the drift.
    Path(env["JOBS_PROFILES"]).write_text("ch: {partition: debug, cpus_per_task: 2, containers: false}\n")
    r = run_jobs(store, "reproduce", run, env=env)
    assert r.code == 2 and f"the run ran in {image.reference}, but profile 'ch' now runs without containers" in r.err
    assert tree_digest(store) == before
    r = run_jobs(store, "reproduce", run, "--allow-env-drift", "--no-wait", env=env)
    assert r.code == 0, r.out + r.err
    assert "environment drift (allowed)" in r.out and "reproduced" not in r.out
    drifted = [x["id"] for x in Store(store).index().runs() if Store(store).run(x["id"]).spec.get("env_drift")]
    assert len(drifted) == 1 and f"jobs reproduce --compare {drifted[0]}" in r.out
    assert wait(store, drifted[0], {"SUCCEEDED", "FAILED", "CANCELLED"}, deadline_s=600, env=env).state == "SUCCEEDED"
    r = run_jobs(store, "reproduce", "--compare", drifted[0][:13], env=env)
    assert r.code == 0 and f"reproduced bit for bit: {drifted[0]} has the same outputs as {run}" in r.out, r.out + r.err
    assert run_jobs(store, "reproduce", "--compare", run, env=env).code == 2   # not a reproduction: one line
    new = Store(store).run(drifted[0])
    assert new.spec["container_image"] is None and "image" not in new.attempts[0]
    assert new.spec["env_drift"] == {"container_image": {"recorded": image.reference, "ran": None}}
    d = run_jobs(store, "diff", run, new.id, env=env)
    assert d.code == 1 and f"env     image {image.reference} -> None" in d.out
    assert f"drift     container_image: recorded {image.reference}, ran None" in run_jobs(store, "show", new.id, env=env).out
