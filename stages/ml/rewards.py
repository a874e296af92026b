"""Rewards for RL: an exact-match verifier, or the rm stage's reward model; served by Ray actors.
Also a math answer verifier (`math_verify`: the final answer of a worked solution against the
reference), used by eval's `verifier: math`.

Both score (prompt, response text, reference answer) triples; the verifier reads the answer, the
reward model ignores it. Verifier rewards are 1.0 / 0.0; reward-model rewards are its raw scores
(GRPO normalises within each group, so their scale does not matter), except that, with an answer
format (`rl.reward.answer_pattern`, tiny: a bare number), a response which is not an answer (does
not match it, or was cut off at max_new_tokens before <eos>) scores below every answer of its batch:
a reward model rates text unlike anything it was trained on arbitrarily, and GRPO finds such text.
Seen on the tiny task without this floor: "7 079" scored ~87 against ~-8 for answers and the policy
wrote nothing else within 40 steps; with bare numbers only, it learned five-digit run-ons ("15425"
for 154) the same way.
"""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Callable

from stages.contract import StageError

KINDS = ("verifier", "reward_model")


def verify(response: str, answer: str) -> float:
    """1.0 when the response, stripped, is exactly the answer."""
    return float(response.strip() == answer)


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|[-+]?\.\d+")


def _last_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...} (or \\fbox{...}), braces balanced; `\\boxed 5` too;
    None if absent or never closed."""
    found = list(re.finditer(r"\\(?:boxed|fbox)\s*", text))
    if not found:
        return None
    i = found[-1].end()
    if not text.startswith("{", i):
        rest = text[i:].split()
        return rest[0].rstrip(".$") if rest else None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the last \\boxed{...}, else the last number; None if neither."""
    boxed = _last_boxed(response)
    if boxed is not None:
        return boxed
    if re.search(r"\\(?:boxed|fbox)", response):
        return None                      # a box that never closes: the response was cut off
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def _frac(m: re.Match) -> str:
    return f"({m.group(1)})/({m.group(2)})"


def normalize_answer(text: str) -> str:
    """A canonical string for an answer: LaTeX wrappers, units of spacing, $, thousands separators
    and a trailing period removed; \\frac{a}{b} -> a/b; numbers in lowest terms ("0.50", "1/2",
    "\\frac{2}{4}" -> "1/2", "5.0" -> "5")."""
    t = text.strip()
    for wrapper in ("\\text", "\\textbf", "\\mathrm", "\\mbox"):
        t = re.sub(re.escape(wrapper) + r"\{([^{}]*)\}", r"\1", t)
    t = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", _frac, t)
    t = re.sub(r"\\[dt]?frac(\d)(\d)", r"\1/\2", t)              # \frac12
    t = t.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
    t = t.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    t = t.replace("\\$", "").replace("$", "")
    t = re.sub(r"\s+", "", t).rstrip(".")
    if "=" in t:                                              # "x=5" -> "5"
        t = t.rsplit("=", 1)[1]
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t.replace("{,}", ","))                # 1,000 -> 1000
    number = _as_number(t)
    if number is not None:
        return str(number)
    return t


def _as_number(t: str) -> Fraction | None:
    """t as an exact rational (5, -2.50, 3/4, (3)/(4)); None when it is not one plain number."""
    m = re.fullmatch(r"\(?([-+]?\d*\.?\d+)\)?(?:/\(?([-+]?\d*\.?\d+)\)?)?", t)
    if not m:
        return None
    try:
        value = Fraction(m.group(1)) / (Fraction(m.group(2)) if m.group(2) else 1)
    except ZeroDivisionError:
        return None
    return value


def math_verify(response: str, answer: str) -> float:
    """1.0 when the response's final answer (last \\boxed{}, else last number) equals the reference
    answer after normalisation (numbers compared exactly as fractions, other text as canonical
    strings); 0.0 otherwise, also when the response has no answer."""
    got = extract_answer(response)
    if got is None:
        return 0.0
    boxed = _last_boxed(answer)
    want = normalize_answer(boxed if boxed is not None else answer)
    return float(normalize_answer(got) == want and want != "")


class RewardWorker:
    """A Ray actor (`ray.remote(RewardWorker)`) scoring batches of rollouts.

    With kind reward_model, `load(folder) -> model` and `score(model, tokenizer, prompts, responses)
    -> (n,)` come from the stage that trains the reward model (rl passes stages.rm's): a shared
    piece never imports a stage."""

    def __init__(self, kind: str, reward_model_dir: str | None = None, threads: int | None = None,
                 answer_pattern: str | None = None, load: Callable | None = None, score: Callable | None = None):
        if kind not in KINDS:
            raise StageError(f"reward kind must be one of {', '.join(KINDS)} (got {kind!r})")
        self.kind = kind
        self.answer = re.compile(answer_pattern) if answer_pattern else None
        if kind == "reward_model":
            import torch

            from stages.ml import lm

            if threads:
                torch.set_num_threads(threads)
            self._score = score
            self.model = load(Path(reward_model_dir))
            self.tokenizer = lm.load_tokenizer(Path(reward_model_dir))

    def score(self, prompts: list[str], responses: list[str], answers: list[str],
              finished: list[bool] | None = None) -> list[float]:
        """`finished[i]`: response i ended with <eos> (not cut off); None: all did.

        The reward model reads each distinct (prompt, stripped response) once, and only those that
        are answers: a GRPO group samples the same few answers over and over, and a non-answer's
        score is replaced by the floor anyway."""
        if self.kind == "verifier":
            return [verify(r, a) for r, a in zip(responses, answers)]
        import torch

        said = [r.strip() for r in responses]
        finished = finished or [True] * len(responses)
        counted = [self.answer is None or (bool(self.answer.fullmatch(s)) and f) for s, f in zip(said, finished)]
        distinct = list(dict.fromkeys((p, s) for p, s, ok in zip(prompts, said, counted) if ok))
        raw: dict = {}
        if distinct:
            with torch.no_grad():
                values = self._score(self.model, self.tokenizer, [p for p, _ in distinct], [s for _, s in distinct])
            raw = dict(zip(distinct, values.tolist()))
        scores = [raw.get((p, s), 0.0) for p, s in zip(prompts, said)]
        if self.answer is None:   # no answer format to hold responses to (rl.reward.answer_pattern)
            return scores
        return below_non_answers(scores, counted)


def below_non_answers(scores: list[float], is_answer: list[bool]) -> list[float]:
    """The scores of answers as they are; every non-answer one below the lowest answer's (all equal)."""
    answers = [s for s, ok in zip(scores, is_answer) if ok]
    floor = min(answers) - 1.0 if answers else 0.0
    return [s if ok else floor for s, ok in zip(scores, is_answer)]
