"""The reward model learns what its initialisation does not know, and keeps what it does.

tiny's preference pairs alternate two kinds (stages/data.py): "sum", the right sum vs its tens digit
one up or one down (on a carrying sum, one down is the carry dropped: the slip the SFT data teach,
so SFT's likelihood prefers it), or vs the sum cut short or run on; and "style", the right sum in
the house style " 68" vs the bare "68" SFT was trained on, which only the preferences say.

The reward model does not start from nothing: its head is fitted on the frozen SFT features next to
the SFT likelihood of the stripped answer (stages/rm.py). That initialisation is the natural
baseline, and the claim is made against it: on the held-out pairs (data.prefs' validation.jsonl,
built on the dev split's operand pairs, none shared with a training pair), the trained reward ranks
more pairs right than the initialisation, by more than the paired bootstrap's noise. A reward
model trained for zero steps fails that check (test below); the other baselines are read the way the
model reads a response (the likelihood of the stripped answer: a "style" pair is a tie).

The slow tests read the rm run of the tiny pipeline (the session fixture of conftest.py: the recipe's
own budgets, seed 1234).
"""
import copy
import json
import random

import pytest

from helpers import artifact_path, latest
from jobs import recipes

#: Asserted accuracy gap between the trained reward and its initialisation on the 400 held-out pairs,
#: and the share of "style" pairs the trained reward must rank right. Measured by bench/rl_seeds.py,
#: seeds 1234 / 7 / 42 (recipes/tiny/README.md has the table):
#:   AMD EPYC, 2026-11-26 (bench/results/rl_seeds-2026-11-26.md): trained 0.975 / 0.985 / 0.995,
#:   initialisation 0.9025 / 0.960 / 0.925, the bootstrap's 0.5% quantile of the gain +0.040 / -0.0025 /
#:   +0.040: the claim held on seeds 1234 and 42, not on seed 7 (training's 10 pairs within the noise);
#:   Intel Xeon AVX512, 2026-11-28 (bench/results/rl_seeds-avx512-seed*-2026-11-28.md): trained 0.9875 /
#:   0.995 / 0.9825, initialisation 0.9325 / 0.9625 / 0.9375, quantile +0.030 / +0.010 / +0.015: it holds
#:   on all three. "Style" pairs 1.000 on every seed of both.
INIT_GAP, STYLE_MIN = 0.02, 0.9


def _right(margin: float) -> float:
    """A pair ranked right counts 1, a tie (margin exactly 0) half, a wrong one 0, as the stage counts."""
    return 1.0 if margin > 0 else 0.5 if margin == 0 else 0.0


def _bootstrap_low(rows: list[dict], better: str, worse: str, n: int = 2000, q: float = 0.005) -> float:
    """The q-quantile of accuracy(better) - accuracy(worse) over pairs resampled with replacement."""
    wins = [_right(r[better]) - _right(r[worse]) for r in rows]
    rng = random.Random(0)
    diffs = sorted(sum(rng.choices(wins, k=len(wins))) / len(wins) for _ in range(n))
    return diffs[int(q * n)]


@pytest.mark.slow
def test_reward_model_beats_its_initialisation_and_the_baselines(pipeline):
    rm = latest(pipeline, "rm")
    check_beats_baselines(rm.metrics, (pipeline.run_dir(rm.id) / "held_out.jsonl").read_text())


def check_beats_baselines(m: dict, held_out_jsonl: str) -> None:
    """The claim, on the rm stage's summary metrics and its held_out.jsonl."""
    rows = [json.loads(line) for line in held_out_jsonl.splitlines()]
    assert m["rm/held_out_pairs"] == len(rows) == 400 and {r["kind"] for r in rows} == {"sum", "style"}
    print(json.dumps({k: round(v, 4) for k, v in m.items() if k.startswith("rm/") and "accuracy" in k}, indent=1))
    # Read as the model reads a response, the SFT likelihood cannot tell " 68" from "68": a tie.
    assert m["rm/style/sft_loglik_accuracy"] == m["rm/style/sft_mean_loglik_accuracy"] == 0.5
    rm, init = m["rm/held_out_accuracy"], m["rm/init_accuracy"]
    # What training adds: more pairs ranked right than the initialisation ranks, beyond sampling noise
    # (the paired bootstrap's 0.5% quantile of the gap is positive).
    assert rm > init + INIT_GAP and _bootstrap_low(rows, "held_out", "init") > 0, \
        f"training added nothing measurable: {rm:.4f} vs its initialisation {init:.4f}"
    assert m["rm/style/held_out_accuracy"] > STYLE_MIN
    for baseline in ("sft_loglik", "sft_mean_loglik", "frozen_head"):
        assert _bootstrap_low(rows, "held_out", baseline) > 0, baseline


@pytest.mark.slow
def test_a_reward_model_trained_for_zero_steps_fails_the_claim(pipeline, tmp_path):
    """rm.steps=0 saves the initialisation: its held-out accuracy is init's, and the check fails.
    Run in this process on the pipeline's own inputs, outside the store (the pipeline's names keep
    pointing at the trained reward model)."""
    from stages import rm as rm_stage
    from stages.contract import StageContext

    trained = latest(pipeline, "rm")
    config = copy.deepcopy(trained.spec["config"])
    config["rm"]["steps"] = 0
    config["tracking"].update(wandb="disabled", tensorboard=False)
    ctx = StageContext(run_id="zero-steps", recipe="tiny", stage="rm", config=config, run_dir=tmp_path,
                       inputs={role: artifact_path(pipeline, art) for role, art in trained.inputs.items()})
    saved = rm_stage.run(ctx)
    m = ctx.summary
    # The same start as the trained run (within a pair: torch's thread count may differ from the job's).
    assert abs(m["rm/init_accuracy"] - trained.metrics["rm/init_accuracy"]) <= 1 / 400
    assert m["rm/held_out_accuracy"] == m["rm/init_accuracy"]
    with pytest.raises(AssertionError, match="training added nothing measurable"):
        check_beats_baselines(m, (tmp_path / "held_out.jsonl").read_text())
    # Nor does the saved initialisation rank the artifact's sums as the trained model must.
    with pytest.raises(AssertionError, match="'style'"):
        check_artifact(saved["reward_model"])


@pytest.mark.slow
def test_saved_reward_model_prefers_right_sums_in_the_house_style(pipeline):
    """The artifact a later stage loads: house style > bare right sum > near miss, prompt by prompt."""
    check_artifact(artifact_path(pipeline, latest(pipeline, "rm").outputs["reward_model"]))


#: The saved artifact's own rankings on 400 random sums, measured (seed 1234, Intel AVX512 host,
#: 2026-11-28): house style over the bare sum 1.000 trained / 0.935 initialisation, right sum over the
#: tens digit one off 0.930 / 0.710, the right sum over a bare "1" 1.000 / 0.995. The bounds sit
#: between: the initialisation fails the first two by over three binomial standard errors (~0.012 and
#: ~0.023 at 400), the trained model passes them by as much (tested on both below).
STYLE_SHARE, TENS_SHARE, OVER_ONE_SHARE = 0.97, 0.85, 0.9


def check_artifact(folder) -> None:
    import torch

    from stages.ml.lm import load_tokenizer
    from stages.rm import inputs, load_reward_model, score

    model, tok = load_reward_model(folder), load_tokenizer(folder)
    rng = random.Random(0)
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(400)]
    sums = [f"{a}+{b}=" for a, b in pairs]
    right = [str(a + b) for a, b in pairs]
    wrong_tens = [str(a + b - 10 if a % 10 + b % 10 >= 10 else a + b + 10) for a, b in pairs]
    with torch.no_grad():
        styled, bare = (score(model, tok, sums, answers) for answers in ([" " + r for r in right], right))
        tens = score(model, tok, sums, wrong_tens)
        one = score(model, tok, sums, ["1"] * len(sums))
    shares = {"style": (styled > bare).float().mean().item(), "tens": (bare > tens).float().mean().item(),
              "over_one": (bare > one).float().mean().item()}
    print(json.dumps(shares))
    assert shares["style"] >= STYLE_SHARE, shares
    assert shares["tens"] >= TENS_SHARE, shares
    # The likelihood term reads the answer, not its whitespace: the house style is the head's alone.
    # Read as written, the space SFT never saw cost ~34 nats; the head grew to cancel it and, that
    # large, rated a bare "1" above the right sum for 94% of prompts on seed 42 (GRPO then answered "1").
    few = sums[:8]
    with torch.no_grad():
        (_, styled_ll), (_, bare_ll) = (model.parts(*inputs(tok, few, answers)) for answers in ([" " + r for r in right[:8]], right[:8]))
    assert torch.allclose(styled_ll, bare_ll, atol=1e-4), (styled_ll, bare_ll)
    assert shares["over_one"] >= OVER_ONE_SHARE, shares


@pytest.mark.parametrize("override, message", [
    ("rm.held_out=1.5", "rm.held_out"), ("rm.held_out=0", "rm.held_out"), ("rm.held_out=dev", "rm.held_out"),
    ("rm.steps=-1", "rm.steps"),
    ("rm.lr=-1e-4", "rm.lr"), ("rm.batch_size=abc", "rm.batch_size"), ("+rm.backend=jax", "rm.backend"),
])
def test_check_config_refuses_bad_values(override, message):
    from stages import rm

    config = recipes.compose(recipes.load("tiny"), "rm", [override])
    problems = rm.check_config(config)
    assert len(problems) == 1 and message in problems[0], problems
    assert rm.check_config(recipes.compose(recipes.load("tiny"), "rm", [])) == []
