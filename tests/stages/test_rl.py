"""RL on the tiny task, measured on fixed seeds: GRPO (verifier reward), on-policy DPO, offline DPO
and GRPO on the reward model's reward raise held-out greedy accuracy and pass@1 above the SFT
model's; GRPO on the reward model stays on answers; the vLLM backend trains for real and its refits
take effect.

The SFT data carry an annotator's slip (data.sft_carry_slips: 60% of the sums with a carry are
written without it), so the SFT model answers most carrying sums wrong by greedy decoding yet still
samples the right answer: reward RL can reach. The pipeline fixture (conftest.py) runs `--stage all`,
whose rl stage is GRPO, and evaluates the SFT model too. Margins: bench/rl_seeds.py measured every
method on seeds 1234, 7 and 42 (recipes/tiny/README.md); each threshold below is under the smallest
gain measured there.
"""
import json

import pytest

from helpers import artifact_path, latest
from helpers import run_jobs

pytestmark = pytest.mark.slow

# (greedy exact match, pass@1) gains over the SFT model a method must beat on seed 1234. Measured gains on
# the test split by bench/rl_seeds.py, seeds 1234 / 7 / 42, at two hosts' kernels:
#  AMD EPYC, AVX512, 2026-11-26 (bench/results/rl_seeds-methods-2026-11-26.md; SFT greedy 0.556 / 0.566 / 0.634):
#   grpo         greedy +0.208 / +0.340 / +0.366, pass@1 +0.167 / +0.251 / +0.281
#   dpo          greedy +0.242 / +0.364 / +0.364, pass@1 +0.157 / +0.238 / +0.273
#   dpo_offline  greedy +0.192 / +0.336 / +0.356, pass@1 +0.130 / +0.189 / +0.233
#   grpo_rm      greedy +0.134 / +0.276 / +0.338, pass@1 +0.098 / +0.177 / +0.253
#                (bench/results/rl_seeds-grpo_rm-2026-11-26.md)
#  Intel Xeon, AVX512, 2026-11-28 at a565a1c, RL on Ray actors (bench/results/rl_seeds-avx512-seed*-2026-11-28.md;
#  SFT greedy 0.640 / 0.590 / 0.660):
#   grpo         greedy +0.266 / +0.400 / +0.312, pass@1 +0.216 / +0.304 / +0.256
#   dpo          greedy +0.286 / +0.406 / +0.310, pass@1 +0.205 / +0.303 / +0.260
#   dpo_offline  greedy +0.254 / +0.400 / +0.300, pass@1 +0.154 / +0.261 / +0.226
#   grpo_rm      greedy +0.212 / +0.398 / +0.288, pass@1 +0.169 / +0.299 / +0.221
# Seed 1234, this suite's, gives every method its smallest gain on both hosts. Each margin was set at
# about three quarters of the AMD host's smallest gain (41-65% of the Intel host's), so that another
# host's seed 1234 (training is bit-deterministic on one host but not across CPUs: another draw) has
# room, and at least four times the noise of one evaluation of a
# fixed model (greedy on 500 prompts: binomial standard error at most 0.022; pass@1 from 8 samples: the
# standard error over prompts of the share of right samples, 0.016-0.018 for the RL models of seed 1234).
# Most methods below run their actors in the stage's process (rl.cluster.actors=local): the same
# classes and calls without a Ray cluster and three processes importing torch. Ray actors write the
# same bytes (tests/stages/test_resume_integrity.py; on this suite's seed 1234 pipeline, GRPO, on-policy
# and offline DPO and GRPO on the reward model gave the same model artifact IDs both ways); the
# pipeline's GRPO (conftest.py) runs in process too; offline DPO, the vLLM test and tests/slurm run on Ray.
LOCAL = ["rl.cluster.actors=local"]
MARGINS = {"grpo": (0.15, 0.12), "dpo": (0.18, 0.11), "dpo_offline": (0.14, 0.10), "grpo_rm": (0.10, 0.07)}


def results(store, model: str) -> dict:
    view = latest(store, "eval", model=model)
    return json.loads((artifact_path(store, view.outputs["report"]) / "results.json").read_text())


def metric_lines(store, view, key: str) -> list[float]:
    lines = (store.run_dir(view.id) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)[key] for line in lines if f'"{key}"' in line]


def rl_run(store, **config):
    """The succeeded rl run whose `rl:` config has these values (dotted keys: "reward.kind")."""
    def value(cfg, key):
        for part in key.split("."):
            cfg = cfg[part]
        return cfg

    for row in store.index().runs(stage="rl"):
        view = store.run(row["id"])
        if view.state == "SUCCEEDED" and all(value(view.spec["config"]["rl"], k) == v for k, v in config.items()):
            return view
    raise AssertionError(f"no succeeded rl run with {config}")


def assert_lifts(store, method: str, view) -> None:
    sft = results(store, latest(store, "sft").outputs["model"])
    after = results(store, view.outputs["model"])
    greedy, pass1 = MARGINS[method]
    assert after["exact_match"] > sft["exact_match"] + greedy, (method, sft, after)
    assert after["pass@1"] > sft["pass@1"] + pass1, (method, sft, after)


def test_grpo_raises_held_out_accuracy_above_the_sft_model(pipeline):
    rl = rl_run(pipeline, **{"algorithm": "grpo", "reward.kind": "verifier", "generation.backend": "hf"})
    assert_lifts(pipeline, "grpo", rl)
    # Its actors ran in the stage's process, so its job started no Ray cluster (no `ray start` logs).
    assert rl.spec.config["rl"]["cluster"]["actors"] == "local"
    assert rl.spec.ray is False and not (pipeline.run_dir(rl.id) / "ray").exists()
    # The rollouts' mean reward rose over the run.
    rewards = metric_lines(pipeline, rl, "rl/reward_mean")
    assert sum(rewards[-20:]) / 20 > sum(rewards[:20]) / 20 + 0.08
    # Greedy validation on 200 dev prompts rose by more than three standard errors of one such
    # measure (~0.032 at 0.7): seed 1234 went 0.705 -> 0.900 (Intel AVX512 host, 2026-11-28).
    val = metric_lines(pipeline, rl, "rl/val_accuracy")
    assert val[-1] > val[0] + 0.10, val


def test_on_policy_dpo_raises_held_out_accuracy_above_the_sft_model(pipeline):
    r = run_jobs(pipeline.root, "submit", "tiny", "--stage", "rl,eval", "rl.algorithm=dpo", *LOCAL,
                 "tracking.wandb=disabled", timeout=1800)
    assert r.code == 0, r.out + r.err
    view = rl_run(pipeline, **{"algorithm": "dpo", "dpo.pairs": "on_policy"})
    assert_lifts(pipeline, "dpo", view)
    # Its rollouts got better (mean reward, first 20 steps -> last 20), so fewer groups disagree and fewer
    # pairs are left to train on. With the splits by operand pair (seed 1234, this suite's run): 913 pairs
    # in the first 10 steps, 584 in the last 10 (-36%); the earlier splits, whose SFT model started
    # higher, left far fewer. The implicit reward's accuracy on the pairs is not asserted: on-policy,
    # each step's rejected answer is one the policy still samples, which keeps it near 0.5.
    rewards = metric_lines(pipeline, view, "rl/reward_mean")
    assert sum(rewards[-20:]) / 20 > sum(rewards[:20]) / 20 + 0.08
    pairs = metric_lines(pipeline, view, "rl/pairs")
    assert sum(pairs[-10:]) < 0.8 * sum(pairs[:10]), pairs


def test_offline_dpo_raises_held_out_accuracy_above_the_sft_model(pipeline):
    """On the recipe's own actors: Ray actors on the job's Ray cluster, as README's tables ran."""
    r = run_jobs(pipeline.root, "submit", "tiny", "--stage", "rl,eval", "rl.algorithm=dpo", "rl.dpo.pairs=offline",
                 "tracking.wandb=disabled", timeout=1800)
    assert r.code == 0, r.out + r.err
    view = rl_run(pipeline, **{"algorithm": "dpo", "dpo.pairs": "offline"})
    assert view.spec["config"]["rl"]["cluster"]["actors"] == "ray"
    assert view.spec.ray is True and (pipeline.run_dir(view.id) / "ray").is_dir()
    assert view.spec["config"]["rl"]["dpo"]["pair_kinds"] == ["sum"]   # the recipe's: right vs wrong sums
    assert_lifts(pipeline, "dpo_offline", view)


def test_grpo_on_the_reward_model_raises_held_out_accuracy_and_keeps_answering_with_numbers(pipeline):
    """A reward model scores text it never saw arbitrarily; without stages/ml/rewards.py's floor for
    non-answers the policy wrote "7 079" and five-digit run-ons within 40 steps (greedy held-out 0.51
    -> 0.0: no answer left a number). With it, GRPO on the reward model's scores lifts held-out
    accuracy, and the greedy answers at the end are numbers of at most three digits, all but a few:
    seed 1234 ended with 0 of 200 off on AVX2 kernels and on an Intel AVX512 host, and 1 ("1\n99") on
    an AMD AVX512 host. The bound, 5 of 200, sits that far from the collapse it guards against."""
    r = run_jobs(pipeline.root, "submit", "tiny", "--stage", "rl,eval", "rl.reward.kind=reward_model",
                 *LOCAL, "tracking.wandb=disabled", timeout=1800)
    assert r.code == 0, r.out + r.err
    view = rl_run(pipeline, **{"reward.kind": "reward_model"})
    assert_lifts(pipeline, "grpo_rm", view)
    last = sorted((pipeline.run_dir(view.id) / "validation").glob("step_*.jsonl"))[-1]
    answers = [json.loads(line)["response"].strip() for line in last.read_text().splitlines()]
    assert last.name == "step_000120.jsonl" and len(answers) == 200
    off = [a for a in answers if not (a.isdigit() and len(a) <= 3)]
    assert len(off) <= 5, off
    # It trained on the reward model's raw scores (negative on seed 1234), not on the verifier's 0/1.
    assert min(metric_lines(pipeline, view, "rl/reward_mean")) < 0


def test_grpo_with_the_vllm_backend_trains_and_its_refits_take_effect(pipeline):
    # lr 1e-3 (5x the default) so that 10 steps surely move some greedy answers, 32 prompts a step (a
    # quarter of the recipe's): this test is about the refit reaching vLLM, not about learning (seed
    # 1234: 119 of the 200 validation answers changed, vLLM gave every one of them).
    r = run_jobs(pipeline.root, "submit", "tiny", "--stage", "rl", "rl.generation.backend=vllm",
                 "rl.grpo.max_num_steps=10", "rl.grpo.val_period=10", "rl.policy.lr=1e-3",
                 "rl.grpo.num_prompts_per_step=32",
                 "tracking.wandb=disabled", timeout=1800)
    assert r.code == 0, r.out + r.err
    view = next(v for v in (pipeline.run(row["id"]) for row in pipeline.index().runs(stage="rl"))
                if v.state == "SUCCEEDED" and v.spec["config"]["rl"]["generation"]["backend"] == "vllm")

    assert len(metric_lines(pipeline, view, "rl/step_time_s")) == 10
    assert view.spec.ray is True and (pipeline.run_dir(view.id) / "ray").is_dir()   # Ray actors: the job's cluster
    # The last validation ran on vLLM after 10 refits; HF greedy decoding of the registered model and
    # of the SFT model on the same prompts tell whether vLLM held the trained weights.
    last = sorted((pipeline.run_dir(view.id) / "validation").glob("step_*.jsonl"))[-1]
    rows = [json.loads(line) for line in last.read_text().splitlines()]
    from stages.ml import lm
    from stages.ml.generate import complete

    def greedy(model_dir):
        return [g[0] for g in complete(lm.load_model(model_dir), lm.load_tokenizer(model_dir),
                                       [r["prompt"] for r in rows], 5)]

    trained = greedy(artifact_path(pipeline, view.outputs["model"]))
    sft = greedy(artifact_path(pipeline, latest(pipeline, "sft").outputs["model"]))
    vllm = [r["response"] for r in rows]
    assert sum(a == b for a, b in zip(vllm, trained)) >= 0.99 * len(rows)
    changed = [i for i, (a, b) in enumerate(zip(trained, sft)) if a != b]
    assert changed, "10 GRPO steps changed no greedy answer: the refit check below would prove nothing"
    assert sum(vllm[i] == trained[i] for i in changed) >= 0.9 * len(changed)
