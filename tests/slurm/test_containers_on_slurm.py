"""Stages start and run inside a foreign image on the dev Slurm cluster, through a real container
runtime: Charliecloud's ch-run on the squashfs that `jobs containers import` made from the dev image
(Debian's Python with torch and the stages' libraries, pinned by digest in the machine's lock, built
by dev/containers/image.sh). The image has neither submitit nor this project: each job brings the
code snapshot and the runtime bundle from the store."""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import QUICK
from helpers import ray_pids, run_jobs, tree_digest
from lineage import Store

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DEV = Path(os.environ.get("JOBS_DEV_DIR", "/var/lib/jobs-dev"))
DEV_LOCK = Path(os.environ.get("JOBS_CONTAINERS_LOCK") or DEV / "containers.lock")
SQSH = DEV / "sqsh"
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")
CHAIN = ("data", "pretrain", "sft")


@pytest.fixture(scope="session")
def dev_image():
    """The dev image as the machine's lock pins it, and its squashfs (imported when missing)."""
    from containers import load_lock
    from jobs import containers

    assert DEV_LOCK.is_file(), f"{DEV_LOCK} is missing: dev/containers/image.sh builds and pins the dev image"
    image = load_lock(DEV_LOCK)["tiny-cpu"]
    assert image.pinned, f"tiny-cpu is not pinned in {DEV_LOCK}"
    return image, containers.squashfs_for(image, SQSH, runtime="charliecloud")


def write_profiles(tmp_path: Path, **extra: str) -> dict:
    lines = [f"host: {{partition: debug, containers: false, cpus_per_task: 2}}",
             f"ch: {{partition: debug, cpus_per_task: 2, container_runtime: charliecloud, container_dir: '{SQSH}'}}"]
    lines += [f"{name}: {body}" for name, body in extra.items()]
    (tmp_path / "profiles.yaml").write_text("\n".join(lines) + "\n")
    return {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(DEV_LOCK)}


def submitted(out: str) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] for line in out.splitlines() if "submitted as Slurm job" in line}


def wait_all(store_path: Path, runs: dict[str, str], env: dict, deadline_s: float) -> dict:
    store = Store(store_path)
    end = time.monotonic() + deadline_s
    while True:
        run_jobs(store_path, "status", env=env)   # folds Slurm's end of a job into the record
        views = {stage: store.run(run) for stage, run in runs.items()}
        if all(v.state in FINAL for v in views.values()) or time.monotonic() > end:
            return views
        time.sleep(3)


def in_image(squashfs: Path, *cmd: str) -> subprocess.CompletedProcess:
    """A command inside the image, on a compute node, as the jobs run: srun + ch-run."""
    return subprocess.run(["srun", "-N1", "-p", "debug", "env", "USER=root", "ch-run", str(squashfs), "--", *cmd],
                          capture_output=True, text=True, timeout=300)


def test_tiny_chain_in_the_image_equals_the_same_chain_on_the_host(tmp_path, dev_image, slurm_cluster):
    image, squashfs = dev_image
    # The image is foreign: it has Python, torch and the ML libraries, not submitit, not this project.
    probe = in_image(squashfs, "python3", "-c", "import submitit")
    assert probe.returncode != 0 and "No module named 'submitit'" in probe.stderr, probe.stderr
    assert in_image(squashfs, "python3", "-c", "import torch, transformers").returncode == 0

    env = write_profiles(tmp_path)
    overrides = [*QUICK, "data.n_corpus_lines=4000", "data.n_sft=2000"]
    stores = {"ch": tmp_path / "in image", "host": tmp_path / "on host"}
    runs = {}
    for profile, store_path in stores.items():
        r = run_jobs(store_path, "submit", "tiny", "--stage", ",".join(CHAIN), "--executor", "slurm",
                     "--profile", profile, *overrides, env=env)
        assert r.code == 0, r.out + r.err
        runs[profile] = submitted(r.out)
        assert sorted(runs[profile]) == sorted(CHAIN)
    views = {p: wait_all(stores[p], runs[p], env, deadline_s=1200) for p in stores}
    for p in stores:
        assert {s: v.state for s, v in views[p].items()} == dict.fromkeys(CHAIN, "SUCCEEDED"), \
            {s: (v.state, v.reason) for s, v in views[p].items()}

    inside, host = views["ch"], views["host"]
    bundle = next((stores["ch"] / "runtime").iterdir())
    for stage in CHAIN:
        spec, attempts = inside[stage].spec, inside[stage].attempts
        # The record names the pinned digest and the bundle; the job itself says it ran in them, on
        # the image's Python (Debian's), not this environment's.
        assert spec["container_image"] == image.reference and spec["container_runtime"] == "charliecloud"
        assert spec["runtime_bundle"]["digest"] == "sha256:" + bundle.name
        assert [a["image"] for a in attempts] == [image.reference]
        assert [a["runtime_bundle"] for a in attempts] == ["sha256:" + bundle.name]
        assert attempts[0]["python_executable"] == "/usr/bin/python3"
        assert "image" not in host[stage].attempts[0]
        assert host[stage].attempts[0]["python_executable"] != "/usr/bin/python3"
        shown = run_jobs(stores["ch"], "show", runs["ch"][stage], env=env)
        assert f"image     {image.reference}  (charliecloud)" in shown.out
        # The same code, config and inputs give the same bytes: the image's torch is this venv's build.
        assert inside[stage].outputs == host[stage].outputs, stage


def test_grpo_runs_its_ray_cluster_inside_the_image_on_both_nodes(tmp_path, upstream_store, dev_image, slurm_cluster):
    image, _ = dev_image
    env = write_profiles(tmp_path, ch2=f"{{partition: debug, nodes: 2, cpus_per_task: 2, "
                                        f"container_runtime: charliecloud, container_dir: '{SQSH}'}}")
    r = run_jobs(upstream_store, "submit", "tiny", "--stage", "rl", "--executor", "slurm", "--profile", "ch2",
                 "rl.grpo.max_num_steps=2", "rl.grpo.num_prompts_per_step=8", "rl.grpo.val_period=2",
                 "rl.grpo.max_val_samples=16", "rl.cluster.rollout_workers=2", "tracking.wandb=disabled",
                 "tracking.tensorboard=false", env=env)
    assert r.code == 0, r.out + r.err
    run = submitted(r.out)["rl"]
    view = wait_all(upstream_store, {"rl": run}, env, deadline_s=900)["rl"]
    assert view.state == "SUCCEEDED", view.reason
    assert view.attempts[0]["nodes"] == ["node1", "node2"] and view.attempts[0]["image"] == image.reference
    assert view.attempts[0]["python_executable"] == "/usr/bin/python3"   # the image's, on both nodes' tasks
    assert view.metrics["rl/ray_nodes"] == 2 and view.metrics["rl/rollout_workers"] == 2
    assert (Path(Store(upstream_store).artifact(view.outputs["model"])["path"]) / "model.safetensors").is_file()
    slurm_cluster.final_state(view.jobs[-1]["job_id"], deadline_s=90)
    assert not ray_pids(f"/tmp/ray-{view.jobs[-1]['job_id']}-")   # nothing of Ray outlives the job


@pytest.fixture(scope="session")
def bare_image(tmp_path_factory) -> tuple[Path, Path]:
    """A Debian image with python3 and nothing else (no torch), as a squashfs named by its own SHA-256,
    and a lock that pins the tiny recipe's image to it."""
    folder = tmp_path_factory.mktemp("bare image")
    rootfs = folder / "rootfs"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=apt", "--include=python3",
                    "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                    "bookworm", str(rootfs), "http://deb.debian.org/debian"], check=True, timeout=900,
                   capture_output=True)
    built = folder / "built.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(built), "-noappend", "-quiet", "-no-progress",
                    "-noI", "-noD", "-noF", "-noX"], check=True, timeout=600, capture_output=True)
    digest = "sha256:" + hashlib.sha256(built.read_bytes()).hexdigest()
    lock = folder / "bare.lock"
    lock.write_text(f"tiny-cpu:\n  image: local/bare-python:1\n  digest: {digest}\n")
    from containers import load_lock
    from jobs.containers import squashfs_name

    sqsh = folder / "sqsh"
    sqsh.mkdir()
    built.rename(sqsh / squashfs_name(load_lock(lock)["tiny-cpu"]))
    return lock, sqsh


def test_an_image_without_torch_is_refused_at_submit_and_fails_in_the_job_in_one_line(
        tmp_path, data_store, bare_image, slurm_cluster, monkeypatch):
    lock, sqsh = bare_image
    store = tmp_path / "store"
    import shutil

    shutil.copytree(data_store, store, symlinks=True)
    (tmp_path / "profiles.yaml").write_text(
        f"bare: {{partition: debug, container_runtime: charliecloud, container_dir: '{sqsh}'}}\n")
    env = {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(lock)}
    before = tree_digest(store)
    r = run_jobs(store, "submit", "tiny", "--stage", "pretrain", "--executor", "slurm", "--profile", "bare",
                 "tracking.wandb=disabled", "tracking.tensorboard=false", env=env)
    # At submit, ch-run asked the image itself: one line, exit 2, nothing recorded.
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and "image local/bare-python@sha256:" in r.err
    assert "lacks torch, transformers, tokenizers, safetensors, numpy, which stage tiny/pretrain imports" in r.err
    assert tree_digest(store) == before

    # Where submit cannot look inside the image (pyxis), the job says it itself, first thing: the
    # same submission with the submit-time probe taken out runs, and the run fails in one line.
    from jobs.executors import slurm
    from jobs.submit import Request, submit

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(slurm, "probe", lambda *a, **k: None)
    lines: list[str] = []
    assert submit(Request("tiny", "pretrain", ["tracking.wandb=disabled", "tracking.tensorboard=false"],
                          executor="slurm", profile="bare", store=str(store)), echo=lines.append)
    run = submitted("\n".join(lines))["pretrain"]
    view = wait_all(store, {"pretrain": run}, env, deadline_s=300)["pretrain"]
    assert view.state == "FAILED"
    assert view.reason.startswith("ImageLacks: image local/bare-python@sha256:")
    assert "lacks torch, transformers, tokenizers, safetensors, numpy, which stage pretrain imports" in view.reason
    assert "\n" not in view.reason and view.attempts[0]["python_executable"] == "/usr/bin/python3"
