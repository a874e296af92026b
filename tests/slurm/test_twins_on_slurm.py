"""nano3's stages submitted to the dev Slurm cluster in the CPU twins of NVIDIA's images, as images: each
twin (dev/containers/twin_image.sh) is pushed to the local registry, pinned by digest in the machine's
lock as `twin-NAME` and imported as a squashfs; the test's lock maps the recipe's `nemo-rl` to it. A job
starts as every container job does (sbatch, srun, ch-run with the image's own environment, runtime.bootstrap
with the runtime bundle) and runs NVIDIA's own entry point in the image's Python, up to its GPU boundary."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "twins"))
from test_containers_on_slurm import SQSH, submitted, wait_all  # noqa: E402
from twin import TOY  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DEV = Path(os.environ.get("JOBS_DEV_DIR", "/var/lib/jobs-dev"))
DEV_LOCK = Path(os.environ.get("JOBS_CONTAINERS_LOCK") or DEV / "containers.lock")
BOUNDARY = "nemo_rl/distributed/virtual_cluster.py"


@pytest.fixture(scope="module")
def twins():
    """{recipe image name: the twin's pinned Image and its squashfs}, as the machine's set-up left them."""
    from containers import load_lock
    from jobs import containers

    assert DEV_LOCK.is_file(), f"{DEV_LOCK} is missing: dev/containers/twin_image.sh builds and pins the twins"
    lock = load_lock(DEV_LOCK)
    got = {}
    for name in ("nemo-rl",):
        assert f"twin-{name}" in lock, f"twin-{name} is not pinned in {DEV_LOCK}: run dev/containers/twin_image.sh {name}"
        image = lock[f"twin-{name}"]
        got[name] = image, containers.squashfs_for(image, SQSH, runtime="charliecloud")
    return got


def toy_inputs(tmp_path: Path, store_path: Path, squashfs: Path) -> None:
    """A toy policy (written by the twin's own transformers, as a checkpoint of that version), prompts and
    preference pairs, added to the store as a user brings their own: the stand-ins of sft's model and of
    prep_rl's and prep_sft's outputs."""
    import json
    import subprocess

    made = subprocess.run(["env", "USER=root", "ch-run", "--set-env", "-b", f"{tmp_path}:{tmp_path}", str(squashfs),
                           "--", "python3", "-c", TOY, str(tmp_path / "model")], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prefs").mkdir()
    for split in ("train", "validation"):
        (tmp_path / "prompts" / f"{split}.jsonl").write_text(
            "".join(f'{{"prompt": "{a}+{a}=?", "answer": "{2 * a}"}}\n' for a in range(1, 9)))
        (tmp_path / "prefs" / f"{split}.jsonl").write_text("".join(
            json.dumps({"prompt": f"{a}+{a}=?", "chosen": str(2 * a), "rejected": str(2 * a + 1)}) + "\n" for a in range(1, 9)))
    for src, kind in (("model", "model"), ("prompts", "rl-prompts"), ("prefs", "pref-data")):
        added = run_jobs(store_path, "add", str(tmp_path / src), "--kind", kind, "--name", f"toy/{src}")
        assert added.code == 0, added.err


#: The nemo-rl image's stages, each submitted on its own with the toy inputs: NeMo RL's driver that runs.
NEMO_RL_STAGES = {
    "rl": (["--input", "policy=toy/model:latest", "--input", "prompts=toy/prompts:latest"], "examples/run_grpo_math.py"),
    "rl-dpo": (["--input", "policy=toy/model:latest", "--input", "prefs=toy/prefs:latest", "rl.algorithm=dpo",
                "rl.checkpointing.metric_name=val:validation-heldout_accuracy"], "examples/run_dpo.py"),
    "rm": (["--input", "model=toy/model:latest", "--input", "data=toy/prefs:latest"], "examples/run_rm.py"),
}


def test_nano3_grpo_dpo_and_rm_in_the_nemo_rl_twin_image_on_slurm_stop_at_nemo_rls_gpu_request(tmp_path, twins, slurm_cluster):
    image, squashfs = twins["nemo-rl"]
    lock = tmp_path / "nano3.lock"
    lock.write_text(f"nemo-rl:\n  image: {image.image}\n  digest: {image.digest}\n")
    (tmp_path / "profiles.yaml").write_text(
        f"twin: {{partition: debug, nodes: 1, gpus_per_node: 0, cpus_per_task: 2, mem_gb: 6, time: 20, "
        f"container_runtime: charliecloud, container_dir: '{SQSH}'}}\n")
    env = {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(lock),
           "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"}   # NeMo RL's own knob, exported to the job by sbatch
    store_path = tmp_path / "store"
    toy_inputs(tmp_path, store_path, squashfs)

    runs = {}
    for name, (args, _) in NEMO_RL_STAGES.items():
        r = run_jobs(store_path, "submit", "nano3", "--stage", name.split("-")[0], "--executor", "slurm",
                     "--profile", "twin", *args, env=env)
        assert r.code == 0, r.out + r.err
        (run_id,) = submitted(r.out).values()
        runs[name] = run_id
    views = wait_all(store_path, runs, env, deadline_s=900)
    store = Store(store_path)
    for name, (_, script) in NEMO_RL_STAGES.items():
        view = views[name]
        (attempt,) = view.attempts
        log = store.run_dir(runs[name])
        assert view.state == "FAILED" and attempt["failure_class"] == "gpu_boundary", (name, view.reason, attempt, log)
        assert attempt["boundary"]["file"] == BOUNDARY, (name, attempt["boundary"])
        assert attempt["boundary"]["message"].startswith("Not enough GPUs available. Requested "), attempt["boundary"]
        # It ran in the image: the twin's digest, the image's Python found by its own PATH, Ray up before.
        assert attempt["image"] == image.reference and attempt["python_executable"] == "/opt/nemo_rl_venv/bin/python3"
        assert {"verify", "ray_start", "stage", "ray_stop"} <= set(attempt["phases"]), (name, attempt["phases"], log)
        # NeMo RL's own driver from the image's checkout, its loader on the config the run rendered.
        shown = run_jobs(store_path, "logs", runs[name], env=env)
        assert f"/opt/nemo-rl/{script}" in shown.out + shown.err, (name, (shown.out + shown.err)[-3000:])
        assert "Loaded configuration from: " in shown.out + shown.err
