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
#: and the share of "style" pairs the trained reward must rank right. Measured by bench/rl_seeds.py
#: (2026-11-26 09:00-09:37 UTC, AMD EPYC host, load ~25 from other jobs; recipes/tiny/README.md has
#: the table), seeds 1234 / 7 / 42: trained 0.975 / 0.985 / 0.995, initialisation 0.9025 / 0.960 /
#: 0.925 (+29 / +10 / +28 pairs; pairs gained 32 / 14 / 28, lost 3 / 4 / 0), the bootstrap's 0.5%
#: quantile of the gain +0.040 / -0.0025 / +0.040; "style" pairs 1.000 on all three. So the claim
#: holds on seeds 1234 and 42 and not on seed 7, where training's 10 pairs are within the noise.
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
    rm_stage.run(ctx)
    m = ctx.summary
    # The same start as the trained run (within a pair: torch's thread count may differ from the job's).
    assert abs(m["rm/init_accuracy"] - trained.metrics["rm/init_accuracy"]) <= 1 / 400
    assert m["rm/held_out_accuracy"] == m["rm/init_accuracy"]
    with pytest.raises(AssertionError, match="training added nothing measurable"):
        check_beats_baselines(m, (tmp_path / "held_out.jsonl").read_text())


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
