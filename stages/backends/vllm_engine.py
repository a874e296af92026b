"""vLLM as the RL rollout engine: token ids in, token ids out, weights refit from a folder.

vLLM runs entirely in the calling process: no engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
no worker process (the "uni" executor), no Ray cluster of its own. So the engine behaves the same in
a plain process and inside a Ray actor (`ray.remote(num_cpus=1)(VLLMEngine).remote(...)`) and uses
the threads it is given. vLLM's CPU default also runs in an actor here, but spawns an engine-core
and a worker process (each importing vllm again: 74 s to a first token) and pins the worker's
OpenMP threads to core 0, reserving core 1, whatever Ray granted the actor.
In-process also means vLLM initialises torch.distributed (gloo, world size 1) here: a trainer that
runs DDP must keep the engine in another process (a Ray actor).

Measured (2 cores shared at load average 7-10, the 0.86M tiny model, float32): LLM() init 6-22 s
after a 17 s `import vllm`; generate 256 prompts x n=8 x 5 tokens 3.7-5.2 s (HF generate 8.6-12.5 s);
load_weights 0.09-0.45 s.
"""
from __future__ import annotations

import json
import os
import random
from contextlib import contextmanager
from pathlib import Path

KV_CACHE_BYTES = 1 << 30     # 1 GiB holds ~98k tokens of the tiny model: 2,048 sequences of 48
MAX_NUM_SEQS = 2048          # a whole RL batch (256 prompts x n=8) in one scheduler step: fewer steps
MAX_BATCHED_TOKENS = 16384   # prefill of 2,048 short prompts at once


@contextmanager
def _keep_process_state():
    """LLM() reseeds the global RNGs, replaces torch.set_num_threads process-wide (the CPU worker
    guards its thread binding, which the in-process executor does not do) and adds tcmalloc and
    libgomp to LD_PRELOAD (for worker processes we do not start). Put all three back so a trainer in
    this process keeps its random streams and thread control, and its subprocesses their loader."""
    import numpy as np
    import torch

    set_num_threads, preload = torch.set_num_threads, os.environ.get("LD_PRELOAD")
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if preload is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = preload


def _reload(worker, weights_path: str) -> None:
    """Runs on vLLM's worker (this process): reload, then re-pack a tied output head.

    On CPU every linear layer computes from a packed copy of its weight, which the reload rebuilds
    for each layer it loads. A tied lm_head loads nothing of its own (its weight is the embedding's),
    so without this it keeps scoring with the old embedding (measured: greedy ids off after a refit).
    """
    worker.reload_weights(weights_path=weights_path)
    model = worker.model_runner.get_model()
    if getattr(worker.model_config.hf_config, "tie_word_embeddings", False) and hasattr(model, "lm_head"):
        model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


class VLLMEngine:
    """One `vllm.LLM` over a saved model folder (config.json, model.safetensors, tokenizer files)."""

    def __init__(self, model_dir: Path, *, seed: int, threads: int | None = None,
                 max_model_len: int | None = None):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        import torch
        from vllm import LLM

        if threads:
            torch.set_num_threads(threads)
        self.eos = json.loads((Path(model_dir) / "config.json").read_text())["eos_token_id"]
        with _keep_process_state():
            self.llm = LLM(
                model=str(model_dir), dtype="float32", seed=seed, max_model_len=max_model_len,
                distributed_executor_backend="uni",
                enforce_eager=True,            # compiled (inductor): init 64 s here, generate no faster
                enable_prefix_caching=False,   # cached KV would outlive a weight refit
                kv_cache_memory_bytes=KV_CACHE_BYTES,
                max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=MAX_BATCHED_TOKENS,
            )

    def generate(self, prompts: list[list[int]], *, n: int, temperature: float, max_new_tokens: int,
                 seed: int, min_new_tokens: int = 0) -> list[list[list[int]]]:
        """Per prompt (token ids, already starting with <bos>), n responses as token-id lists: the
        generated tokens only, ending with <eos> when one was generated. temperature 0 = greedy.
        Same seed -> same output. A response also stops where prompt + response fill max_model_len."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # One seed per prompt (vLLM gives sample j of a prompt seed + j): equal prompts in a batch
        # still draw different responses, and the whole call depends only on `seed`.
        rng = random.Random(seed)
        params = [SamplingParams(n=n, temperature=temperature, max_tokens=max_new_tokens, min_tokens=min_new_tokens,
                                 seed=rng.getrandbits(48), stop_token_ids=[self.eos], detokenize=False)
                  for _ in prompts]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return [[list(c.token_ids) for c in out.outputs] for out in outputs]

    def load_weights(self, folder: Path) -> None:
        """Replace the weights by those in folder/model.safetensors (HF parameter names, same
        architecture). The KV cache is not reused across calls (no prefix caching), so the next
        generate sees only the new weights."""
        path = Path(folder) / "model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"no weights to load: {path} does not exist")
        self.llm.collective_rpc(_reload, args=(str(folder),))
