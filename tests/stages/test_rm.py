"""The reward model learns a preference the SFT model does not hold, and keeps the one it does.

tiny's preference pairs alternate two kinds (stages/data.py): "sum", the right sum vs its tens digit
one up or one down (on a carrying sum, one down is the carry dropped: the slip the SFT data teach,
so SFT's likelihood prefers it), or vs the sum cut short or run on; and "style", the right sum in
the house style " 68" vs the bare "68" SFT was trained on, which only the preferences say and which
SFT's likelihood ranks the wrong way. So neither the SFT likelihood (no RM training) nor a head on
the frozen SFT features (it cannot relearn addition) can rank both kinds; the trained reward model
can.

The slow tests read the rm run of the tiny pipeline (the session fixture of conftest.py: the recipe's
own budgets, seed 1234). Noise is measured in the test: a paired bootstrap over the held-out pairs.
"""
import json
import random

import pytest

from helpers import artifact_path, latest
from jobs import recipes

#: Asserted gaps between the trained reward and each baseline (accuracy on the 400 held-out pairs).
#: Measured per seed by bench/rl_seeds.py (recipes/tiny/README.md has the table; 2026-11-25 18:00 UTC,
#: AMD EPYC host), seeds 1234 / 7 / 42: reward 1.000 / 0.985 / 0.995, SFT likelihood 0.465 / 0.468 /
#: 0.463, head alone on frozen features 0.743 / 0.750 / 0.730 (it reads the answer's length, which one
#: "sum" pair in two varies).
LOGLIK_GAP, FROZEN_HEAD_GAP = 0.3, 0.08


def _bootstrap_low(rows: list[dict], better: str, worse: str, n: int = 2000, q: float = 0.005) -> float:
    """The q-quantile of accuracy(better) - accuracy(worse) over pairs resampled with replacement."""
    wins = [(r[better] > 0) - (r[worse] > 0) for r in rows]
    rng = random.Random(0)
    diffs = sorted(sum(rng.choices(wins, k=len(wins))) / len(wins) for _ in range(n))
    return diffs[int(q * n)]


@pytest.mark.slow
def test_reward_model_beats_the_sft_likelihood_and_the_head_alone(pipeline):
    rm = latest(pipeline, "rm")
    check_beats_baselines(rm.metrics, (pipeline.run_dir(rm.id) / "held_out.jsonl").read_text())


def check_beats_baselines(m: dict, held_out_jsonl: str) -> None:
    """The assertions, on the rm stage's summary metrics and its held_out.jsonl."""
    rows = [json.loads(line) for line in held_out_jsonl.splitlines()]
    assert m["rm/held_out_pairs"] == len(rows) == 400 and {r["kind"] for r in rows} == {"sum", "style"}
    rm, loglik, mean_loglik, frozen = (m[f"rm/{k}"] for k in (
        "held_out_accuracy", "sft_loglik_accuracy", "sft_mean_loglik_accuracy", "frozen_head_accuracy"))
    print(json.dumps({k: round(v, 4) for k, v in m.items() if k.startswith("rm/") and "accuracy" in k}, indent=1))
    # Each baseline fails one kind: the likelihood prefers the bare answer SFT learned, the frozen
    # head cannot tell right sums from near misses. The reward gets both.
    assert m["rm/style/sft_loglik_accuracy"] < 0.1 and m["rm/style/sft_mean_loglik_accuracy"] < 0.1
    assert m["rm/sum/frozen_head_accuracy"] < 0.75
    assert m["rm/style/held_out_accuracy"] > 0.9            # measured 1.000 on seeds 1234, 7 and 42
    # Learned more than SFT knew: of the "sum" pairs SFT's likelihood ranks the wrong way (the slip:
    # 14 / 13 / 15 of 200 on seeds 1234 / 7 / 42), the reward ranks 14 / 8 / 14 the right way.
    slips = [r for r in rows if r["kind"] == "sum" and r["sft_loglik"] <= 0]
    assert len(slips) >= 8 and sum(r["held_out"] > 0 for r in slips) > len(slips) / 2, slips
    assert rm > max(loglik, mean_loglik) + LOGLIK_GAP and rm > frozen + FROZEN_HEAD_GAP, m
    # Larger than sampling noise: the paired bootstrap's 0.5% quantile of each gap is still positive.
    for baseline in ("sft_loglik", "sft_mean_loglik", "frozen_head"):
        assert _bootstrap_low(rows, "held_out", baseline) > 0, baseline


@pytest.mark.slow
def test_saved_reward_model_prefers_right_sums_in_the_house_style(pipeline):
    """The artifact a later stage loads: house style > bare right sum > near miss, prompt by prompt."""
    check_artifact(artifact_path(pipeline, latest(pipeline, "rm").outputs["reward_model"]))


def check_artifact(folder) -> None:
    import torch

    from stages.ml.lm import load_tokenizer
    from stages.rm import inputs, load_reward_model, score

    model, tok = load_reward_model(folder), load_tokenizer(folder)
    prompts = ["12+30=", "45+21=", "33+33=", "50+40=", "18+71=", "26+52=", "9+80=", "64+27="]
    right = [str(eval(p[:-1])) for p in prompts]
    with torch.no_grad():
        styled, bare = (score(model, tok, prompts, answers) for answers in ([" " + r for r in right], right))
    # Measured: styled > bare 8 of 8 on seeds 1234, 7 and 42.
    assert (styled > bare).sum() >= 7
    # Right over wrong in the tens digit (the "sum" pairs' kind) on 40 pairs: measured 1.0 / 0.975 / 0.975.
    rng = random.Random(0)
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(40)]
    sums = [f"{a}+{b}=" for a, b in pairs]
    wrong_tens = [str(a + b - 10 if a % 10 + b % 10 >= 10 else a + b + 10) for a, b in pairs]
    with torch.no_grad():
        margin = score(model, tok, sums, [str(a + b) for a, b in pairs]) - score(model, tok, sums, wrong_tens)
    assert (margin > 0).float().mean() >= 0.75
    # The likelihood term reads the answer, not its whitespace: the house style is the head's alone.
    # Read as written, the space SFT never saw cost ~34 nats; the head grew to cancel it and, that
    # large, rated a bare "1" above the right sum for 94% of prompts on seed 42 (GRPO then answered "1").
    with torch.no_grad():
        (_, styled_ll), (_, bare_ll) = (model.parts(*inputs(tok, prompts, answers)) for answers in ([" " + r for r in right], right))
        one = score(model, tok, sums, ["1"] * len(sums))
        right_sums = score(model, tok, sums, [str(a + b) for a, b in pairs])
    assert torch.allclose(styled_ll, bare_ll, atol=1e-4), (styled_ll, bare_ll)
    assert (one < right_sums).float().mean() >= 0.9


@pytest.mark.parametrize("override, message", [
    ("rm.held_out=1.5", "rm.held_out"), ("rm.held_out=0", "rm.held_out"), ("rm.steps=0", "rm.steps"),
    ("rm.lr=-1e-4", "rm.lr"), ("rm.batch_size=abc", "rm.batch_size"), ("+rm.backend=jax", "rm.backend"),
])
def test_check_config_refuses_bad_values(override, message):
    from stages import rm

    config = recipes.compose(recipes.load("tiny"), "rm", [override])
    problems = rm.check_config(config)
    assert len(problems) == 1 and message in problems[0], problems
    assert rm.check_config(recipes.compose(recipes.load("tiny"), "rm", [])) == []
