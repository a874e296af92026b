"""The tiny model and its files: a Llama-style causal LM built from config, saved in HF format.

A model artifact is one folder that `from_pretrained` reads: config.json, model.safetensors,
generation_config.json and the tokenizer files, so a downstream stage needs a single input. The
saved tokenizer puts <bos> in front of a plain `tokenizer(text)` call, as the model was trained;
our own code encodes explicitly (`encode`), so it never depends on that default.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from stages.contract import StageError

ARCH_KEYS = ("hidden", "intermediate", "layers", "heads", "max_len")
DEVICES = ("cpu", "cuda", "auto")


def arch_problems(arch: dict[str, Any]) -> list[str]:
    """What is wrong with a `model:` section (all of it, for one error message)."""
    missing = [k for k in ARCH_KEYS if k not in arch]
    if missing:
        return [f"model.{k} is missing" for k in missing]
    problems = []
    if arch["hidden"] % arch["heads"]:
        problems.append(f"model.hidden {arch['hidden']} is not a multiple of model.heads {arch['heads']}")
    elif arch["hidden"] // arch["heads"] < 32:
        problems.append(f"head_dim = hidden / heads = {arch['hidden'] // arch['heads']} < 32 (vLLM's CPU kernels need >= 32)")
    if arch["layers"] < 1 or arch["max_len"] < 8:
        problems.append("model.layers must be >= 1 and model.max_len >= 8")
    return problems


def device_problems(config: dict, resources: dict | None = None) -> list[str]:
    """What is wrong with the config's `device` (absent: cpu), for a stage's check_config.

    `cuda` needs a GPU where the stage runs: the stage's resources ask for one (a Slurm job), or
    this machine has one (a local run). Only then is torch imported, so a CPU submit stays fast."""
    want = config.get("device", "cpu")
    if want not in DEVICES:
        return [f"device must be one of {', '.join(DEVICES)} (got {want!r})"]
    if want == "cuda" and not (resources or {}).get("gpus_per_node"):
        import torch

        if not torch.cuda.is_available():
            return ["device is cuda, but no CUDA device is visible here and the stage's resources ask for "
                    "no GPU (gpus_per_node): use device=cpu, or device=auto to take a GPU when there is one"]
    return []


def device_of(config: dict) -> str:
    """cpu or cuda: the config's `device` (absent: cpu), `auto` resolved where the stage runs."""
    want = config.get("device", "cpu")
    if want == "cpu":
        return want
    if want not in DEVICES:
        raise StageError(f"device must be one of {', '.join(DEVICES)} (got {want!r})")
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if want == "cuda":
        raise StageError("device is cuda, but torch sees no CUDA device on this node")
    return "cpu"


def autocast(device: str):
    """The precision of training forward passes: bf16 autocast on CUDA (weights, gradients, optimizer
    state and the log-softmax stay float32); on CPU nothing, so CPU arithmetic is exactly float32."""
    import contextlib

    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()


def setup_torch(seed: int, dist=None, device: str = "cpu", cpus: int = 0) -> int:
    """Deterministic CPU math: fixed seeds, a fixed thread count, deterministic kernels.

    The thread count is part of the arithmetic (reduction order), so it is pinned: Slurm's
    cpus_per_task when set, else this machine's cores shared by the ranks running on it (all of
    them when `dist` lists no nodes: local processes). `cpus`: the allocation's cpus_per_task
    (`ctx.resources`), 0 when not known. An exact resume needs the same count.
    On CUDA the rank's GPU is `dist.local_rank`; deterministic kernels are asked for (cuBLAS's
    workspace set for it) but an op without one only warns: no bit-exactness is claimed on GPUs.
    Returns the thread count.
    """
    import numpy as np
    import torch

    threads = cpus
    if not threads:
        ranks_here = dist.world_size if dist is not None and not dist.nodes else 1
        threads = max(1, (os.cpu_count() or 1) // ranks_here)
    torch.set_num_threads(threads)
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.cuda.set_device(dist.local_rank if dist is not None else 0)
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.use_deterministic_algorithms(True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return threads


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def build_model(arch: dict[str, Any], tokenizer):
    """A fresh LlamaForCausalLM sized by `arch` (hidden, layers, heads, intermediate, max_len)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=arch["hidden"],
        intermediate_size=arch["intermediate"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["heads"],
        max_position_embeddings=arch["max_len"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        attn_implementation="eager",   # sdpa gives the same numbers here, eager is the deterministic reference
    )
    return LlamaForCausalLM(config)


def load_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


def _bos_by_default(tokenizer) -> None:
    """Make `tokenizer(text)` start with <bos>, as every training row did."""
    from tokenizers import processors

    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and tokenizer.bos_token_id is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokenizer.bos_token} $A", special_tokens=[(tokenizer.bos_token, tokenizer.bos_token_id)])


def save_model(model, tokenizer, out: Path, max_new_tokens: int = 8) -> Path:
    """HF folder: weights (safetensors), config, generation config (greedy, stops at eos), tokenizer."""
    from transformers import GenerationConfig

    unwrapped = getattr(model, "module", model)
    unwrapped.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, max_new_tokens=max_new_tokens, do_sample=False)
    unwrapped.save_pretrained(out, safe_serialization=True)
    _bos_by_default(tokenizer)
    tokenizer.save_pretrained(out)
    return out


def encode(tokenizer, texts: list[str], bos: bool = True, eos: bool = False) -> list[list[int]]:
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []   # it refuses an empty batch
    head = [tokenizer.bos_token_id] if bos else []
    tail = [tokenizer.eos_token_id] if eos else []
    return [head + x + tail for x in ids]


def pad(rows: list[list[int]], value: int, left: bool = False):
    """A (batch, longest) LongTensor and its attention mask."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl] = torch.tensor(r, dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask
