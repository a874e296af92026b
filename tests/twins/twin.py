"""The CPU twins of NVIDIA's images' Pythons (dev/twin_venv.sh): .venv-nemo-rl (the nemo-rl image's default
venv), .venv-nemo-rl-vllm (the same image's vLLM worker venv, python-VllmGenerationWorker), .venv-nemo-rl-mcore
(its Megatron policy worker venv, python-MegatronPolicyWorker) and .venv-nemo (the
nemo image's /opt/venv): where they are, and running this project's code in one as a job in that image would
(our runtime bundle on the path, nothing else of ours)."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Run in a twin as `python -c TOY DIR`: a one-layer Llama and a character tokenizer with a chat template in
#: DIR, the model NeMo RL's drivers load in the tests (the SFT model's stand-in).
TOY = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
words = ["<pad>", "<s>", "</s>", "<unk>", *"0123456789+=?"]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
fast.save_pretrained(sys.argv[1])
LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)).save_pretrained(sys.argv[1])
"""


@dataclass(frozen=True)
class Twin:
    """One image's twin: its venv, the checkout whose uv.lock is the image's, and its Dockerfile."""

    image: str
    venv: Path
    checkout: Path        # NeMo RL's (the image's /opt/nemo-rl) or Megatron-Bridge's (/opt/Megatron-Bridge)
    dockerfile: str       # in the checkout

    @property
    def py(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def lock(self) -> Path:
        return self.checkout / "uv.lock"

    def require(self) -> None:
        if not self.py.exists():
            pytest.skip(f"{self.py} is missing: run dev/twin_venv.sh {self.image} to run its twin tests",
                        allow_module_level=True)

    def image_env(self) -> dict[str, str]:
        """The environment the image's Dockerfile sets (its `ENV` lines, dev/containers/dockerfile_env.py, as the
        twin's image has it; PATH and the venv's own location aside, which the twin venv has elsewhere): e.g.
        TORCH_CUDA_ARCH_LIST, which NeMo RL's Megatron path requires."""
        sys.path.insert(0, str(ROOT / "dev" / "containers"))
        from dockerfile_env import environment

        elsewhere = ("PATH", "UV_PROJECT_ENVIRONMENT", "NEMO_RL_VENV_DIR", "VIRTUAL_ENV")
        return {k: v for k, v in environment(self.checkout / self.dockerfile).items() if k not in elsewhere}

    def run(self, args: list[str], timeout: float = 300, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        """`python ARGS` in the twin with the image's environment and only our code's root on the path (as the
        runtime bundle is in a job)."""
        from runtime.entry import SUBMITTER_ONLY    # a job drops them too: the test's own W&B service is not the image's

        full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV")) and k not in SUBMITTER_ONLY}
        full.update(self.image_env())
        full.update({"PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX", "/tmp/jobs-pycache")})
        full.update(env or {})
        return subprocess.run([str(self.py), *args], capture_output=True, text=True, timeout=timeout, env=full,
                              cwd=kw.pop("cwd", ROOT), **kw)

    def execute(self, root: Path, recipe: str, stage: str, inputs: list[str], overrides: list[str] = (),
                env: dict | None = None, timeout: float = 300) -> tuple[str, subprocess.CompletedProcess]:
        """A run of the recipe's stage recorded in the store at `root`, then run by the job's entry in the twin's
        Python, started the way a container job starts (runtime.bootstrap with the runtime bundle): its id and
        the finished process."""
        from jobs import bundle
        from jobs.plan import make_plan
        from jobs.provenance import CodeChanged
        from jobs.record import record
        from lineage import Store

        store = Store(root)
        for tries in range(5):   # the snapshot refuses code that changes under it (an edit in the checkout)
            plan = make_plan(store, recipe, stage, overrides=list(overrides), inputs=inputs)
            try:
                (run_id,) = record(store, plan)
                break
            except CodeChanged:
                assert tries < 4
        shipped = bundle.store(bundle.collect(), root)   # submitit for the job's start, as a container job gets it
        return run_id, self.run(["-c", EXECUTE, str(root), run_id], timeout=timeout,
                                env={"JOBS_RUNTIME_BUNDLE": str(shipped), **(env or {})})


#: nano3's Megatron stages at toy size: short sequences, two iterations (the recipe's parallel layout kept:
#: Bridge's import builds the toy at TP 1).
TOY_BRIDGE = {
    "pretrain": ["pretrain.model.seq_length=32", "pretrain.train.train_iters=2", "pretrain.train.global_batch_size=64",
                 "pretrain.train.eval_interval=2", "pretrain.train.eval_iters=1", "pretrain.checkpoint.save_interval=2"],
    "sft": ["sft.dataset.seq_length=32", "sft.dataset.packed_sequence=false", "sft.train.train_iters=2",
            "sft.train.global_batch_size=64", "sft.train.eval_interval=2", "sft.train.eval_iters=1",
            "sft.checkpoint.save_interval=2"],
}

#: `python -c EXECUTE STORE RUN_ID`: the job's entry, as a container job starts it.
EXECUTE = ("import sys, runtime.bootstrap as boot\nboot.use_bundle()\nfrom runtime.entry import execute\n"
           "execute(sys.argv[1], sys.argv[2])\n")

NEMO_RL_TWIN = Twin("nemo-rl", ROOT / ".venv-nemo-rl", ROOT / ".venv-nemo-rl" / "nemo-rl", "docker/Dockerfile")
NEMO_RL_VLLM_TWIN = Twin("nemo-rl-vllm", ROOT / ".venv-nemo-rl-vllm", ROOT / ".venv-nemo-rl-vllm" / "nemo-rl",
                         "docker/Dockerfile")
NEMO_RL_MCORE_TWIN = Twin("nemo-rl-mcore", ROOT / ".venv-nemo-rl-mcore", ROOT / ".venv-nemo-rl-mcore" / "nemo-rl",
                          "docker/Dockerfile")
NEMO_TWIN = Twin("nemo", ROOT / ".venv-nemo", ROOT / ".venv-nemo" / "Megatron-Bridge", "docker/Dockerfile.ci")
TWINS = (NEMO_RL_TWIN, NEMO_RL_VLLM_TWIN, NEMO_RL_MCORE_TWIN, NEMO_TWIN)
# The nemo-rl twin's, by the names its tests use.
VENV, PY, NEMO_RL, LOCK = NEMO_RL_TWIN.venv, NEMO_RL_TWIN.py, NEMO_RL_TWIN.checkout, NEMO_RL_TWIN.lock
require, image_env, run = NEMO_RL_TWIN.require, NEMO_RL_TWIN.image_env, NEMO_RL_TWIN.run


def mirror() -> Path:
    """The pinned upstream archives (../shared/upstream unless JOBS_UPSTREAM_MIRROR names another folder)."""
    return Path(os.environ.get("JOBS_UPSTREAM_MIRROR") or ROOT.parent / "shared" / "upstream")


def source(archive: str, into: Path) -> Path:
    """An upstream archive of the mirror unpacked into `into` (its top folder)."""
    import tarfile

    path = mirror() / archive
    if not path.exists():
        pytest.skip(f"{path} is missing: set JOBS_UPSTREAM_MIRROR to the folder of the pinned upstream archives")
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top
