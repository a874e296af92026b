"""GRPO step throughput: our rl stage against TRL's GRPOTrainer, same model, prompts and shapes.

    .venv/bin/python bench/rl.py [--store /tmp/jobs-bench-rl] [--prompts 32] [--generations 8]
                                 [--steps 12] [--skip 2] [--max-new-tokens 5] [--min-new-tokens 0]
                                 [--threads 1] [--rounds 1] [--dynamic]

A like-for-like pair on one machine, measured in one run: the tiny recipe's SFT model (built into
--store on first use: data, pretrain, sft, and a 10-step rm that rl's inputs require but the
exact-match reward never reads; reused when present), the data stage's rl prompts,
P prompts x G samples per optimizer step (one step per generation batch), T new tokens sampled at
temperature 1 with HF `generate`, an exact-match reward, the same k3 KL coefficient, clip 0.2/0.28,
lr and torch thread count on both sides, and the same update: advantages against the group mean
divided by the group's std (ours: `use_leave_one_out_baseline=false`; TRL's default), AdamW betas
(0.9, 0.95) with no weight decay, a constant learning rate from the first step (ours: warmup 0 and
min_lr_ratio 1; TRL: lr_scheduler_type constant), gradients clipped at norm 1.

The long-completion shape: --min-new-tokens N --max-new-tokens M gives completions of N to M tokens
on both sides, longer than the prompt (~7 tokens) when N > 7: <eos> gets probability 0 for the
first N new tokens (ours: rl.generation.min_new_tokens; TRL: generation_kwargs min_new_tokens, HF's
processor; both take log-probs from the unmasked policy). Without it the model ends its answer
after ~2.5 tokens (the SFT model, and the pretrained one too: --model pretrain). Ours packs each
group's prompt once: the larger the prompt's share of the tokens, the more that saves, so long
completions show the gain where it is smallest.

Ours: `jobs submit tiny --stage rl` (local executor, Ray actors); each step logs `rl/step_time_s`
(generation, reward, train step, refit) and `rl/generated_tokens` (eos included) to metrics.jsonl.
TRL: GRPOTrainer (use_cpu, no vLLM, loss_type bnpo = our token-level mean); a callback times each
step from on_step_begin to on_step_end (generation, reward, reference and policy passes, optimizer)
and the reward function counts completion tokens (eos included). Start-up (job, Ray, trainer
construction) is outside both clocks, and the first --skip steps of each side are dropped.

Like for like means `rl.grpo.use_dynamic_sampling=false`: both sides train on every group with the
same token-mean loss. --dynamic adds a row with the recipe's default (only groups whose rewards
differ are trained): less compute, but not the same update (the mean runs over fewer tokens and the
dropped groups' KL term is gone), so it gets no ratio. --rounds N alternates ours and TRL N times
(the machine is shared: a round's ratio is measured under one load). The table carries the command,
the date and os.getloadavg() around every run.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

JOBS = str(Path(sys.executable).parent / "jobs")
RM_STUB = ("rm.steps=10", "rm.warmup=2")   # rl takes a reward model as input; the exact-match reward never reads it


def jobs(store: Path, *argv: str) -> str:
    r = subprocess.run([JOBS, "--store", str(store), *argv], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"jobs {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def artifact_dir(store: Path, alias: str) -> Path | None:
    from lineage import Store
    from lineage.errors import NotFound

    if not store.is_dir():
        return None
    try:
        s = Store(store)
        return Path(s.artifact(s.resolve_artifact(alias))["path"])
    except NotFound:
        return None


def ensure_upstream(store: Path, model: str = "sft") -> tuple[Path, Path]:
    """The policy's model folder (tiny's sft or pretrain model) and the rl prompts folder; the pipeline
    up to rm is built if missing (a checkout that changed since would re-run every stage, so each
    present piece is reused as is)."""
    if artifact_dir(store, "tiny/sft/model:latest") is None:
        print(f"building data, pretrain, sft, rm into {store} (minutes) ...", file=sys.stderr)
        jobs(store, "submit", "tiny", "--stage", "data,pretrain,sft,rm", "tracking.wandb=disabled", *RM_STUB)
    elif artifact_dir(store, "tiny/rm/reward_model:latest") is None:
        jobs(store, "submit", "tiny", "--stage", "rm", "tracking.wandb=disabled", *RM_STUB)
    return artifact_dir(store, f"tiny/{model}/model:latest"), artifact_dir(store, "tiny/data/rl:latest")


def summarize(times: list[float], tokens: list[int], skip: int) -> dict:
    t, n = times[skip:], tokens[skip:]
    return {"steps": len(t), "tokens_s": sum(n) / sum(t), "steps_min": 60 * len(t) / sum(t),
            "step_s": sum(t) / len(t), "tokens_step": sum(n) / len(n)}


def run_ours(store: Path, a: argparse.Namespace, dynamic: bool = False) -> dict:
    overrides = [
        # The update TRL's GRPOTrainer makes: group-mean baseline, constant lr from step 0.
        "rl.grpo.use_leave_one_out_baseline=false", "rl.policy.warmup=0", "rl.policy.min_lr_ratio=1.0",
        "rl.policy.weight_decay=0.0", "rl.policy.max_grad_norm=1.0",
        "rl.algorithm=grpo", f"rl.grpo.num_prompts_per_step={a.prompts}",
        f"rl.grpo.num_generations_per_prompt={a.generations}", f"rl.grpo.max_num_steps={a.steps}",
        "rl.generation.backend=hf", f"rl.generation.max_new_tokens={a.max_new_tokens}",
        "rl.generation.temperature=1.0", f"rl.loss_fn.reference_policy_kl_penalty={a.kl}",
        f"rl.generation.min_new_tokens={a.min_new_tokens}",
        f"rl.policy.lr={a.lr}", f"rl.cluster.threads={a.threads}",
        # false: TRL trains on every group; so do we, like for like. true: the recipe's default, which
        # trains only on groups whose rewards differ (the others have zero advantage).
        f"rl.grpo.use_dynamic_sampling={str(dynamic).lower()}",
        f"rl.grpo.val_period={a.steps + 1}", f"rl.checkpointing.save_period={a.steps + 1}",
        "tracking.wandb=disabled", "tracking.tensorboard=false",
    ]
    if a.model != "sft":
        overrides.append(f"--input=policy=tiny/{a.model}/model:latest")
    out = jobs(store, "submit", "tiny", "--stage", "rl", "--force", *overrides)
    run_id = re.findall(r"^(\S+)\s+rl\s+SUCCEEDED", out, re.M)
    if not run_id:
        raise SystemExit(f"no succeeded rl run in:\n{out}")
    rows = [json.loads(x) for x in (store / "runs" / run_id[-1] / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rl/step_time_s" in r]
    result = summarize([r["rl/step_time_s"] for r in steps], [r["rl/generated_tokens"] for r in steps], a.skip)
    result["reward"] = sum(r["rl/reward_mean"] for r in steps) / len(steps)
    counted = steps[a.skip:]
    parts = {k: sum(r[f"rl/{k}_s"] for r in counted) / len(counted) for k in ("generate", "reward", "refit")}
    parts["train"] = result["step_s"] - sum(parts.values())
    result["parts"] = parts
    return result


def run_trl(model_dir: Path, prompts_dir: Path, a: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(a.threads)
    rows = [json.loads(x) for x in (prompts_dir / "train.jsonl").read_text().splitlines()]
    counted: list[int] = []
    rewards: list[float] = []

    def exact_match(completions, answer, completion_ids, **_) -> list[float]:
        counted.extend(len(ids) for ids in completion_ids)
        scores = [float(c.strip() == y) for c, y in zip(completions, answer)]
        rewards.extend(scores)
        return scores

    times: list[float] = []
    tokens: list[int] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.n0 = time.perf_counter(), len(counted)

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)
            tokens.append(sum(counted[self.n0:]))

    batch = a.prompts * a.generations
    config = GRPOConfig(
        output_dir=str(a.store / "trl-out"), use_cpu=True, bf16=False, report_to="none", disable_tqdm=True,
        gradient_checkpointing=False, save_strategy="no", logging_steps=a.steps + 1, seed=1234,
        per_device_train_batch_size=batch, generation_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=a.generations, num_iterations=1, max_completion_length=a.max_new_tokens,
        temperature=1.0, beta=a.kl, learning_rate=a.lr, max_steps=a.steps, loss_type="bnpo",
        epsilon=0.2, epsilon_high=0.28, use_bias_correction_kl=False, use_vllm=False,
        # Our loop's optimizer and schedule (stages/ml/loop.py): AdamW (0.9, 0.95), no decay, constant lr.
        adam_beta1=0.9, adam_beta2=0.95, weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=1.0, scale_rewards="group",
        generation_kwargs={"min_new_tokens": a.min_new_tokens} if a.min_new_tokens else None,
    )
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=exact_match, args=config,
                          train_dataset=Dataset.from_list(rows), callbacks=[StepClock()])
    with contextlib.redirect_stdout(sys.stderr):         # Trainer prints its summary: keep stdout the table
        trainer.train()
    result = summarize(times, tokens, a.skip)
    result["reward"] = sum(rewards) / len(rewards)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/jobs-bench-rl"), help="reused when it holds the models")
    ap.add_argument("--prompts", type=int, default=32, help="P: prompts per step")
    ap.add_argument("--generations", type=int, default=8, help="G: samples per prompt (the group)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=2, help="first steps of each side not counted (warm-up)")
    ap.add_argument("--max-new-tokens", type=int, default=5, help="T")
    ap.add_argument("--min-new-tokens", type=int, default=0, help="no <eos> before this many new tokens, both sides")
    ap.add_argument("--kl", type=float, default=0.01, help="K: k3 KL coefficient (TRL's beta)")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides (1: the machine is shared)")
    ap.add_argument("--rounds", type=int, default=1, help="ours then TRL, this many times")
    ap.add_argument("--dynamic", action="store_true", help="also ours with dynamic sampling (not the same update)")
    ap.add_argument("--model", choices=("sft", "pretrain"), default="sft",
                    help="the policy: tiny's SFT model, or the pretrained one (completions as long as it writes them)")
    a = ap.parse_args()
    if a.steps <= a.skip:
        raise SystemExit("--steps must exceed --skip")

    import datetime

    command = " ".join([os.path.relpath(sys.executable), *sys.argv])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    model_dir, prompts_dir = ensure_upstream(a.store, a.model)
    rows = []                      # (name, result, load before, load after)

    def timed(name: str, fn, *args, **kw) -> dict:
        before = os.getloadavg()
        r = fn(*args, **kw)
        rows.append((name, r, before, os.getloadavg()))
        return r

    pairs = []
    for k in range(a.rounds):
        tag = f" #{k + 1}" if a.rounds > 1 else ""
        ours = timed(f"ours{tag} (jobs rl, hf, every group)", run_ours, a.store, a)
        trl = timed(f"TRL GRPOTrainer{tag}", run_trl, model_dir, prompts_dir, a)
        pairs.append((tag, ours, trl))
    if a.dynamic:
        timed("ours, dynamic sampling (recipe default; not the same update)", run_ours, a.store, a, dynamic=True)

    import trl as trl_pkg

    print(f"`{command}`, {date}; policy: tiny's {a.model} model; P={a.prompts} prompts x G={a.generations} samples, T={a.max_new_tokens} new "
          f"tokens (at least {a.min_new_tokens}), KL {a.kl}, lr {a.lr}, {a.threads} torch threads; {a.steps} steps, first {a.skip} not counted; "
          f"TRL {trl_pkg.__version__}; {os.cpu_count()} cores\n")
    print("| | s/step | steps/min | generated tokens/s | tokens/step | mean reward | load avg 1/5/15 min before -> after |\n"
          "|---|---:|---:|---:|---:|---:|---|")
    for name, r, before, after in rows:
        load = f"{'/'.join(f'{x:.1f}' for x in before)} -> {'/'.join(f'{x:.1f}' for x in after)}"
        print(f"| {name} | {r['step_s']:.3f} | {r['steps_min']:.1f} | {r['tokens_s']:,.0f} | "
              f"{r['tokens_step']:.0f} | {r['reward']:.3f} | {load} |")
    for tag, ours, trl in pairs:
        print(f"| **ours / TRL{tag}** (TRL s/step / ours s/step) | **{trl['step_s'] / ours['step_s']:.2f}x** | "
              f"{ours['steps_min'] / trl['steps_min']:.2f}x | {ours['tokens_s'] / trl['tokens_s']:.2f}x | | | |")
    for name, r, _, _ in rows:
        if "parts" in r:
            print(f"\n{name}, mean s per counted step: " + ", ".join(f"{k} {v:.3f}" for k, v in r["parts"].items())
                  + " (train = the rest: reference and policy passes, backward, optimizer, Ray calls)")


if __name__ == "__main__":
    main()
