"""The tiny model and its files: a Llama-style causal LM built from config, saved in HF format.

A model artifact is one folder that `from_pretrained` reads: config.json, model.safetensors,
generation_config.json and the tokenizer files, so a downstream stage needs a single input.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any


def setup_torch(seed: int, threads: int | None = None) -> None:
    """Deterministic CPU math: fixed seeds, a fixed thread count, deterministic kernels."""
    import numpy as np
    import torch

    torch.set_num_threads(threads or int(os.environ.get("SLURM_CPUS_PER_TASK", 0)) or os.cpu_count() or 1)
    torch.use_deterministic_algorithms(True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
        attn_implementation="eager",
    )
    return LlamaForCausalLM(config)


def load_model(path: Path, cls: str = "causal"):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    if cls == "reward":
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    return AutoModelForCausalLM.from_pretrained(path)


def save_model(model, tokenizer, out: Path, max_new_tokens: int = 8) -> Path:
    """HF folder: weights (safetensors), config, generation config (greedy, stops at eos), tokenizer."""
    from transformers import GenerationConfig

    unwrapped = getattr(model, "module", model)
    if hasattr(unwrapped, "generation_config"):
        unwrapped.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, max_new_tokens=max_new_tokens, do_sample=False)
    unwrapped.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def encode(tokenizer, texts: list[str], bos: bool = True, eos: bool = False) -> list[list[int]]:
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
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
