"""The CPU twin of the nemo-rl image's Python (.venv-nemo-rl, dev/twin_venv.sh): where it is, and running
this project's code in it as a job in that image would (our runtime bundle on the path, nothing else of ours)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-nemo-rl"
PY = VENV / "bin" / "python"
NEMO_RL = VENV / "nemo-rl"          # NeMo RL 823fcc904's checkout, as /opt/nemo-rl in the image
LOCK = NEMO_RL / "uv.lock"
#: Run in the twin as `python -c TOY DIR`: a one-layer Llama and a character tokenizer with a chat template in
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


def require() -> None:
    if not PY.exists():
        pytest.skip(f"{PY} is missing: run dev/twin_venv.sh to run the twin tests", allow_module_level=True)


def image_env() -> dict[str, str]:
    """The environment NeMo RL's Dockerfile sets in the image (`ENV K=V` lines; PATH and the venv's own
    location aside, which the twin has elsewhere): e.g. TORCH_CUDA_ARCH_LIST, which its Megatron path requires."""
    import shlex

    env = {}
    for line in (NEMO_RL / "docker" / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV ") and "=" in line:
            for word in shlex.split(line[4:]):
                key, _, value = word.partition("=")
                if key not in ("PATH", "UV_PROJECT_ENVIRONMENT", "NEMO_RL_VENV_DIR") and "$" not in value:
                    env[key] = value
    return env


def run(args: list[str], timeout: float = 300, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`python ARGS` in the twin with the image's environment and only our code's root on the path (as the
    runtime bundle is in a job)."""
    from runtime.entry import SUBMITTER_ONLY    # a job drops them too: the test's own W&B service is not the image's

    full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV")) and k not in SUBMITTER_ONLY}
    full.update(image_env())
    full.update({"PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX", "/tmp/jobs-pycache")})
    full.update(env or {})
    return subprocess.run([str(PY), *args], capture_output=True, text=True, timeout=timeout, env=full, cwd=kw.pop("cwd", ROOT), **kw)


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
