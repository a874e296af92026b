"""Stages start and run inside a foreign image on the dev Slurm cluster, through a real container
runtime: Charliecloud's ch-run on the squashfs that `jobs containers import` made from the dev image
(Debian's Python with torch and the stages' libraries, pinned by digest in the machine's lock, built
by dev/containers/image.sh). The image has neither submitit nor this project: each job brings the
code snapshot and the runtime bundle from the store."""
from __future__ import annotations

import hashlib
import json
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
    lines = ["host: {partition: debug, containers: false, cpus_per_task: 2}",
             f"ch: {{partition: debug, cpus_per_task: 2, container_runtime: charliecloud, container_dir: '{SQSH}'}}"]
    lines += [f"{name}: {body}" for name, body in extra.items()]
    (tmp_path / "profiles.yaml").write_text("\n".join(lines) + "\n")
    return {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(DEV_LOCK)}


def submitted(out: str) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] for line in out.splitlines() if "submitted as Slurm job" in line}


def wait_all(store_path: Path, runs: dict[str, str], env: dict, deadline_s: float) -> dict:
    """The runs' views once all are final (or at the deadline): the records, which the jobs write,
    read every 2 s; `jobs status` (a process of its own; it folds what only Slurm saw, such as a
    job cancelled for its dependency, into the records) every third time and before returning."""
    store = Store(store_path)
    end = time.monotonic() + deadline_s
    polls = 0
    while True:
        done = all(store.run(run).state in FINAL for run in runs.values()) or time.monotonic() > end
        if done or polls % 3 == 0:
            run_jobs(store_path, "status", env=env)
            views = {stage: store.run(run) for stage, run in runs.items()}
            if all(v.state in FINAL for v in views.values()) or time.monotonic() > end:
                return views
        polls += 1
        time.sleep(2)


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
    overrides = [o for o in QUICK if not o.startswith("rm.")] + ["data.n_corpus_lines=4000", "data.n_sft=2000"]
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
    # Scored by the reward model: the barely trained policy never spells a sum right, so under the
    # verifier every group would tie and the run, having trained nothing, would fail its results gate.
    r = run_jobs(upstream_store, "submit", "tiny", "--stage", "rl", "--executor", "slurm", "--profile", "ch2",
                 "rl.reward.kind=reward_model", "rl.grpo.max_num_steps=2", "rl.grpo.num_prompts_per_step=8", "rl.grpo.val_period=2",
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
    """A Debian image with python3 and nothing else (no torch: the dev image's base before its Python
    packages, dev/containers/rootfs.sh's tar), as a squashfs named by its own SHA-256, and a lock that
    pins the tiny recipe's image to it."""
    folder = tmp_path_factory.mktemp("bare image")
    rootfs = folder / "rootfs"
    rootfs.mkdir()
    base = sorted((DEV / "image").glob("base-*.tar"))
    assert len(base) == 1, f"{DEV / 'image'}: dev/containers/rootfs.sh keeps one base-*.tar, found {base}"
    subprocess.run(["tar", "-C", str(rootfs), "-xf", str(base[0])], check=True, timeout=600, capture_output=True)
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
                          executor="slurm", profile="bare", store=str(store)), echo=lines.append).ok
    run = submitted("\n".join(lines))["pretrain"]
    view = wait_all(store, {"pretrain": run}, env, deadline_s=300)["pretrain"]
    assert view.state == "FAILED"
    assert view.reason.startswith("environment: ImageLacks: image local/bare-python@sha256:")
    assert view.attempts[0]["failure_class"] == "environment"   # the image lacks it: a retry would too
    assert "lacks torch, transformers, tokenizers, safetensors, numpy, which stage pretrain imports" in view.reason
    assert "\n" not in view.reason and view.attempts[0]["python_executable"] == "/usr/bin/python3"


#: nano3's stages that run on CPU in the dev image; eval needs vLLM, which the image does not carry, and
#: runs on the host, reading rl's model from the same store.
NANO3 = ("prep_pretrain", "prep_sft", "prep_rl", "pretrain", "sft", "rm", "rl", "export")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nano3_toy_chain_runs_through_the_container_path_and_each_stage_reads_its_upstreams_format(
        tmp_path, dev_image, slurm_cluster):
    """nano3's images (nemo, nemo-rl) pinned, for this test, to the dev image: nano3's whole chain at
    toy scale on the dev cluster, each stage started by runtime.bootstrap under ch-run: prep_pretrain
    on the recipe's two nodes (its Ray tasks on both write the tokens of a direct tokenization), the
    other prep stages for real, the torch training stages reading nano3's prepared formats
    (stages/ml/formats.py), export; then eval on vLLM (CPU) on the host."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
    sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
    import make
    from test_prep import _direct_docs

    from stages.ml import formats
    from stages.ml import indexed

    image, _ = dev_image
    src = tmp_path / "src"
    make.make(src)
    make.base_model(src)
    lock = tmp_path / "nano3.lock"
    lock.write_text("".join(f"{name}:\n  image: {image.image}\n  digest: {image.digest}\n" for name in ("nemo", "nemo-rl")))
    ch = f"partition: debug, gpus_per_node: 0, cpus_per_task: 2, time: 30, container_runtime: charliecloud, container_dir: '{SQSH}'"
    (tmp_path / "profiles.yaml").write_text(
        # prep_pretrain on the recipe's nodes (two); the other stages on one node each: a profile sets
        # nodes for every stage of a submission, and the non-Ray prep stages would run once per node.
        f"ch2: {{{ch}, mem_gb: 2}}\n"
        f"ch: {{{ch}, nodes: 1, mem_gb: 4}}\n"
        "host: {partition: debug, containers: false, nodes: 1, gpus_per_node: 0, cpus_per_task: 2, mem_gb: 4, time: 30}\n")
    env = {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(lock)}
    store_path = tmp_path / "store"
    chain = make.chain_overrides(src)
    stage_of = [o.lstrip("+~").split(".")[0] for o in chain]

    def submit(stages: tuple[str, ...], profile: str) -> dict[str, str]:
        """The runs of these stages, submitted with the chain's overrides of them and of no other stage."""
        r = run_jobs(store_path, "submit", "nano3", "--stage", ",".join(stages), "--executor", "slurm",
                     "--profile", profile, "tracking.wandb=disabled",
                     *[o for o, s in zip(chain, stage_of) if s in stages or s not in (*NANO3, "eval")], env=env)
        assert r.code == 0, r.out + r.err
        runs = submitted(r.out)
        assert sorted(runs) == sorted(stages)
        return runs

    views = wait_all(store_path, submit(NANO3[:1], "ch2"), env, deadline_s=900)
    assert views["prep_pretrain"].state == "SUCCEEDED", views["prep_pretrain"].reason
    assert views["prep_pretrain"].attempts[0]["nodes"] == ["node1", "node2"]
    assert views["prep_pretrain"].metrics["prep/ray_nodes"] == 2
    direct = _direct_docs(src)
    assert views["prep_pretrain"].metrics["prep/tokens"] == sum(len(d) for docs in direct.values() for d in docs)
    views.update(wait_all(store_path, submit(NANO3[1:], "ch"), env, deadline_s=1800))
    assert {s: v.state for s, v in views.items()} == dict.fromkeys(NANO3, "SUCCEEDED"), \
        {s: (v.state, v.reason) for s, v in views.items() if v.state != "SUCCEEDED"}
    for stage, view in views.items():
        assert [a["image"] for a in view.attempts] == [image.reference], stage
        assert view.attempts[0]["python_executable"] == "/usr/bin/python3", stage

    views.update(wait_all(store_path, submit(("eval",), "host"), env, deadline_s=900))
    assert views["eval"].state == "SUCCEEDED", views["eval"].reason
    assert views["eval"].inputs["model"] == views["rl"].outputs["model"] and "image" not in views["eval"].attempts[0]

    store = Store(store_path)
    m = {s: v.metrics for s, v in views.items()}

    def output(stage: str, name: str) -> Path:
        return Path(store.artifact(views[stage].outputs[name])["path"])

    # pretrain read the Megatron shards of the blend: every document it packed is a shard's document.
    blend = output("prep_pretrain", "blend")
    prefixes = json.loads((blend / "blend.json").read_text())
    shard_docs = {tuple(d.tolist()) for p in prefixes for d in indexed.read(blend / p)}
    read_back = [tuple(x) for x in formats.blend_documents(blend)]
    assert shard_docs and set(read_back) <= shard_docs
    assert m["pretrain"]["pretrain/blocks"] == sum(len(d) for d in read_back) // 64
    # sft trained on Bridge's training.jsonl, rm on prep_sft's pairs, rl on prep_rl's prompts.
    assert m["sft"]["sft/pairs"] == len(_rows(output("prep_sft", "sft") / "training.jsonl"))
    pairs = len(_rows(output("prep_sft", "prefs") / "train.jsonl"))
    assert m["rm"]["rm/held_out_pairs"] == pairs - int(pairs * 0.75)
    assert m["rl"]["rl/prompts"] == len(_rows(output("prep_rl", "prompts") / "train.jsonl"))
    # rl's rewards came from rm's model and moved the policy (a group of equal rewards has no gradient).
    assert m["rl"]["rl/zero_signal_groups"] < 4 and m["rl"]["rl/grad_norm"] > 0
    # eval: pass@k from vLLM on prep_rl's eval set.
    report = output("eval", "report")
    results = json.loads((report / "results.json").read_text())
    assert {"pass@1", "pass@4"} <= set(results) and all(0 <= results[k] <= 1 for k in ("pass@1", "pass@4"))
    assert len(_rows(report / "samples.jsonl")) == len(_rows(output("prep_rl", "eval") / "test.jsonl"))
    # export: the folder, written inside the image, loads in a fresh interpreter here and gives rl's
    # model's logits.
    check = ("import sys, torch; from transformers import AutoModelForCausalLM as M; "
             "a, b = (M.from_pretrained(p) for p in sys.argv[1:]); x = torch.tensor([[1, 5, 9, 20]]); "
             "assert torch.equal(a(x).logits, b(x).logits); print('ok')")
    p = subprocess.run([sys.executable, "-c", check, str(output("export", "hf")), str(output("rl", "model"))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
