"""nano3's nine stages submitted to the dev Slurm cluster in the CPU twins of NVIDIA's images, as images:
each twin (dev/containers/twin_image.sh) is pushed to the local registry, pinned by digest in the machine's
lock as `twin-NAME` and imported as a squashfs; the test's lock maps the recipe's `nemo` and `nemo-rl` to
them. A job starts as every container job does (sbatch, srun, ch-run with the image's own environment,
runtime.bootstrap with the runtime bundle) and runs in the image's Python: the CPU stages to the end, the
GPU stages through NVIDIA's own code (Megatron-Bridge's AutoBridge, NeMo RL's drivers, vLLM's engine) up to the first
call a CPU refuses, which the run records as its GPU boundary."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
import make  # noqa: E402
from test_containers_on_slurm import SQSH, submitted, wait_all  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "twins"))
from twin import TOY_BRIDGE  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

DEV = Path(os.environ.get("JOBS_DEV_DIR", "/var/lib/jobs-dev"))
DEV_LOCK = Path(os.environ.get("JOBS_CONTAINERS_LOCK") or DEV / "containers.lock")
MAKE = Path(make.__file__)
#: Where each GPU stage stops: the upstream file that refused (a CPU has no CUDA device to give).
BRIDGE = "megatron/bridge/models/model_provider.py"      # provide_distributed_model: torch.cuda.set_device
NEMO_RL = "nemo_rl/distributed/virtual_cluster.py"        # the placement groups: "Not enough GPUs available"
VLLM = "vllm/config/device.py"                            # an engine's LLM(...): no platform, no device
#: Run in the nemo twin as `python3 -c BASE SRC`: a one-layer Qwen2 with the sources' tokenizer, in SRC/qwen
#: (a Llama's Megatron provider asks for rope fusion, which needs Transformer Engine: not in the twin).
BASE = """
import sys
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
src = Path(sys.argv[1])
tok = AutoTokenizer.from_pretrained(src / "tokenizer")
Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                             bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                             tie_word_embeddings=True)).save_pretrained(src / "qwen")
tok.save_pretrained(src / "qwen")
"""
#: The runs after the prep stages: stage, its arguments (inputs a prep stage did not make come from the toy
#: base, as a user brings their own), the image, and where it ends: SUCCEEDED, or its GPU boundary's file.
RUNS = {
    "pretrain": ("pretrain", ["base_model.hf_model_id={src}/qwen", *TOY_BRIDGE["pretrain"]], "nemo", BRIDGE),
    "sft": ("sft", ["--input", "model=toy/qwen:latest", *TOY_BRIDGE["sft"]], "nemo", BRIDGE),
    "export": ("export", ["--input", "model=toy/qwen:latest"], "nemo", "SUCCEEDED"),
    "rm": ("rm", ["--input", "model=toy/qwen:latest"], "nemo-rl", NEMO_RL),
    "rl": ("rl", ["--input", "policy=toy/qwen:latest"], "nemo-rl", NEMO_RL),
    "rl-dpo": ("rl", ["--input", "policy=toy/qwen:latest", "rl.algorithm=dpo",
                      "rl.checkpointing.metric_name=val:validation-heldout_accuracy"], "nemo-rl", NEMO_RL),
    # The job in the image's default venv, its vLLM engines in the image's python-VllmGenerationWorker.
    "eval": ("eval", ["--input", "model=toy/qwen:latest", "tracking.wandb=disabled"], "nemo-rl", VLLM),
}
#: NeMo RL's driver each nemo-rl run starts from the image's checkout.
DRIVERS = {"rm": "examples/run_rm.py", "rl": "examples/run_grpo_math.py", "rl-dpo": "examples/run_dpo.py"}


@pytest.fixture(scope="module")
def twins():
    """{recipe image name: the twin's pinned Image and its squashfs}, as the machine's set-up left them."""
    from containers import load_lock
    from jobs import containers

    assert DEV_LOCK.is_file(), f"{DEV_LOCK} is missing: dev/containers/twin_image.sh builds and pins the twins"
    lock = load_lock(DEV_LOCK)
    got = {}
    for name in ("nemo", "nemo-rl"):
        assert f"twin-{name}" in lock, f"twin-{name} is not pinned in {DEV_LOCK}: run dev/containers/twin_image.sh {name}"
        image = lock[f"twin-{name}"]
        got[name] = image, containers.squashfs_for(image, SQSH, runtime="charliecloud")
    return got


def in_twin(squashfs: Path, folder: Path, *cmd: str) -> None:
    """A command in the twin's image, with its environment, `folder` bound (a folder under /tmp: a bind's
    target must exist in the read-only image)."""
    import subprocess

    p = subprocess.run(["env", "USER=root", "ch-run", "--set-env", f"--bind={folder}:{folder}", str(squashfs), "--", *cmd],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def test_nano3s_nine_stages_in_the_twin_images_on_slurm_succeed_or_stop_at_their_gpu_boundary(tmp_path, twins, slurm_cluster):
    from jobs import recipes

    src = tmp_path / "src"
    src.mkdir()
    # The toy sources and base, written by the nemo image's own libraries (its tokenizer files are its
    # transformers' format), as a user's data and checkpoint made there.
    shutil.copy(MAKE, tmp_path / "make.py")
    in_twin(twins["nemo"][1], tmp_path, "python3", str(tmp_path / "make.py"), str(src))
    in_twin(twins["nemo"][1], tmp_path, "python3", "-c", BASE, str(src))
    lock = tmp_path / "nano3.lock"
    lock.write_text("".join(f"{name}:\n  image: {image.image}\n  digest: {image.digest}\n" for name, (image, _) in twins.items()))
    ch = f"partition: debug, gpus_per_node: 0, cpus_per_task: 2, time: 20, container_runtime: charliecloud, container_dir: '{SQSH}'"
    # prep_pretrain on the recipe's two nodes (its Ray tasks on both); every other stage on one.
    (tmp_path / "profiles.yaml").write_text(f"twin2: {{{ch}, mem_gb: 3}}\ntwin: {{{ch}, nodes: 1, mem_gb: 6}}\n")
    env = {"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(lock),
           "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"}   # NeMo RL's own knob (ask once, not 6 times), exported by sbatch
    store_path = tmp_path / "store"
    added = run_jobs(store_path, "add", str(src / "qwen"), "--kind", "model", "--name", "toy/qwen")
    assert added.code == 0, added.err
    prep = make.overrides(src)

    def submit(stage: str, profile: str, *args: str) -> dict[str, str]:
        r = run_jobs(store_path, "submit", "nano3", "--stage", stage, "--executor", "slurm", "--profile", profile,
                     *[a.replace("{src}", str(src)) for a in args], env=env)
        assert r.code == 0, r.out + r.err
        return submitted(r.out)

    views = wait_all(store_path, submit("prep_pretrain", "twin2", *prep["prep_pretrain"]), env, deadline_s=900)
    views.update(wait_all(store_path, submit("prep_sft,prep_rl", "twin", *prep["prep_sft"], *prep["prep_rl"]),
                          env, deadline_s=900))
    runs = {}
    for name, (stage, args, _, _) in RUNS.items():
        (runs[name],) = submit(stage, "twin", *args).values()
    views.update(wait_all(store_path, runs, env, deadline_s=1500))
    store = Store(store_path)

    for stage in ("prep_pretrain", "prep_sft", "prep_rl"):
        assert views[stage].state == "SUCCEEDED", (stage, views[stage].reason)
        assert set(views[stage].outputs) == set(recipes.load("nano3").stages[stage].outputs)
    assert views["prep_pretrain"].attempts[0]["nodes"] == ["node1", "node2"]
    assert views["prep_pretrain"].metrics["prep/ray_nodes"] == 2          # Ray 2.49.2 on both nodes
    for name, (stage, _, image, end) in RUNS.items():
        view = views[name]
        attempt = view.attempts[-1]
        where = (name, view.reason, store.run_dir(runs[name]))
        # Every run in its twin's image, with the image's Python (found by the image's own PATH).
        assert [a["image"] for a in view.attempts] == [twins[image][0].reference], where
        assert attempt["python_executable"] == {"nemo": "/opt/venv/bin/python3",
                                                "nemo-rl": "/opt/nemo_rl_venv/bin/python3"}[image], where
        if end == "SUCCEEDED":
            assert view.state == "SUCCEEDED", where
            continue
        assert view.state == "FAILED" and attempt["failure_class"] == "gpu_boundary" and len(view.attempts) == 1, where
        assert attempt["boundary"]["file"] == end, (where, attempt["boundary"])
        assert {"verify", "stage"} <= set(attempt["phases"]), (where, attempt["phases"])
        log = run_jobs(store_path, "logs", runs[name], env=env)
        if end == VLLM:            # both engines got there, each in the image's vLLM worker venv
            assert attempt["boundary"]["message"] == "vLLM found no platform (no GPU): Device string must not be empty"
            assert (log.out + log.err).count("RuntimeError: Device string must not be empty") == 2, (log.out + log.err)[-3000:]
            assert "/opt/ray_venvs/nemo_rl.models.generation.vllm.vllm_worker.VllmGenerationWorker/lib/" in log.out + log.err
        elif image == "nemo-rl":   # NeMo RL's driver from the image's checkout, on the config the run rendered
            assert attempt["boundary"]["message"].startswith("Not enough GPUs available. Requested "), attempt["boundary"]
            assert f"/opt/nemo-rl/{DRIVERS[name]}" in log.out + log.err and "Loaded configuration from: " in log.out + log.err
            assert "ray_start" in attempt["phases"]
        else:                      # Bridge's import of the base, from the image's Bridge
            assert "/opt/Megatron-Bridge/src/megatron/bridge/" in log.out + log.err, (log.out + log.err)[-3000:]
    # export's folder, written in the image, loads in a fresh interpreter of the image.
    hf = Path(store.artifact(views["export"].outputs["hf"])["path"])
    in_twin(twins["nemo"][1], tmp_path, "python3", "-c",
            "import sys; from transformers import AutoModelForCausalLM as M; M.from_pretrained(sys.argv[1])", str(hf))

    # An image without the vLLM Python a config names: refused at submit, in one line, before a queue
    # wait; nothing recorded.
    before = sorted(p.name for p in (store_path / "runs").iterdir())
    r = run_jobs(store_path, "submit", "nano3", "--stage", "eval", "--executor", "slurm", "--profile", "twin",
                 "--input", "model=toy/qwen:latest", "eval.vllm_python=/usr/local/bin/python-NoSuchWorker", env=env)
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    assert f"image {twins['nemo-rl'][0].reference}'s /usr/local/bin/python-NoSuchWorker lacks vllm" in r.err, r.err
    assert sorted(p.name for p in (store_path / "runs").iterdir()) == before
