"""Rewards for RL: an exact-match verifier, or the rm stage's reward model; served by Ray actors.

Both score (prompt, response text, reference answer) triples; the verifier reads the answer, the
reward model ignores it. Verifier rewards are 1.0 / 0.0; reward-model rewards are its raw scores
(GRPO normalises within each group, so their scale does not matter).
"""
from __future__ import annotations

from pathlib import Path

KINDS = ("verifier", "reward_model")


def verify(response: str, answer: str) -> float:
    """1.0 when the response, stripped, is exactly the answer."""
    return float(response.strip() == answer)


class RewardWorker:
    """A Ray actor (`ray.remote(RewardWorker)`) scoring batches of rollouts."""

    def __init__(self, kind: str, reward_model_dir: str | None = None, threads: int | None = None):
        if kind not in KINDS:
            raise ValueError(f"reward kind must be one of {', '.join(KINDS)} (got {kind!r})")
        self.kind = kind
        if kind == "reward_model":
            import torch

            from stages import lm
            from stages.rm import load_reward_model

            if threads:
                torch.set_num_threads(threads)
            self.model = load_reward_model(Path(reward_model_dir))
            self.tokenizer = lm.load_tokenizer(Path(reward_model_dir))

    def score(self, prompts: list[str], responses: list[str], answers: list[str]) -> list[float]:
        if self.kind == "verifier":
            return [verify(r, a) for r, a in zip(responses, answers)]
        import torch

        from stages.rm import encode, score

        with torch.no_grad():
            return score(self.model, self.tokenizer, *encode(self.tokenizer, prompts, [r.strip() for r in responses])).tolist()
