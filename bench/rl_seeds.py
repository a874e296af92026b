"""Does RL lift the tiny task's held-out accuracy, by how much, and how much does that vary by seed?

    .venv/bin/python bench/rl_seeds.py                       # seeds 1234 7 42, every method
    .venv/bin/python bench/rl_seeds.py --seeds 7 --methods grpo,dpo_offline

For each seed, a fresh store runs the pipeline to the reward model (`jobs submit tiny --stage
data,pretrain,sft,rm seed=S`: data, SFT model and reward model all depend on the seed), evaluates
the SFT model, then runs each RL method on that SFT model and evaluates it (greedy exact match and
pass@k on the 500 held-out pairs, eval stage). Methods are the tiny recipe's defaults plus one
override each:

    grpo         GRPO, verifier reward (the recipe's default rl stage)
    grpo_rm      GRPO, the rm stage's reward model as the reward (rl.reward.kind=reward_model)
    dpo          DPO on on-policy pairs (best vs worst rollout of a group)
    dpo_offline  DPO on data.prefs (rl.dpo.pairs=offline)

The table gives each run's gain over its seed's SFT model, then per method the mean gain, the
smallest, and the standard deviation over seeds: tests/stages/test_rl.py asserts margins on seed
1234 that this spread has to leave room for.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

JOBS = str(Path(sys.executable).parent / "jobs")
METHODS = {
    "grpo": [],
    "grpo_rm": ["rl.reward.kind=reward_model"],
    "dpo": ["rl.algorithm=dpo"],
    "dpo_offline": ["rl.algorithm=dpo", "rl.dpo.pairs=offline"],
}
METRICS = ("exact_match", "pass@1", "pass@8")


def jobs(store: Path, *args: str) -> str:
    """Runs `jobs --store STORE ARGS` and returns its output; exits with it if it fails."""
    r = subprocess.run([JOBS, "--store", str(store), *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"jobs {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def submitted(out: str, stage: str) -> str:
    """The run ID `jobs submit` printed for `stage`: the run it made, or the identical one it reused
    (the newest rl run of the store is another method's when this one was reused)."""
    return [line.split()[0] for line in out.splitlines() if line.split()[1:2] == [stage]][-1]


def newest(store: Path, stage: str, **inputs):
    """The newest SUCCEEDED run of `stage` whose inputs include these, or None."""
    from lineage import Store

    s = Store(store)
    for row in s.index().runs(stage=stage) if s.root.exists() else ():
        view = s.run(row["id"])
        if view.state == "SUCCEEDED" and all(view.inputs.get(k) == v for k, v in inputs.items()):
            return view
    return None


def results(store: Path, model: str) -> dict:
    """The held-out results of the newest eval of this model artifact."""
    from lineage import Store

    report = newest(store, "eval", model=model).outputs["report"]
    return json.loads((Path(Store(store).artifact(report)["path"]) / "results.json").read_text())


def _gain_low(store: Path) -> float:
    """The paired bootstrap's 0.5% quantile of the reward model's accuracy gain over its initialisation
    on the held-out pairs (held_out.jsonl): the gain the test asserts must stay above it."""
    import random

    from lineage import Store

    rows = [json.loads(line) for line in (Store(store).run_dir(newest(store, "rm").id) / "held_out.jsonl").read_text().splitlines()]
    right = lambda v: 1.0 if v > 0 else 0.5 if v == 0 else 0.0   # noqa: E731
    wins = [right(r["held_out"]) - right(r["init"]) for r in rows]
    rng = random.Random(0)
    return sorted(sum(rng.choices(wins, k=len(wins))) / len(wins) for _ in range(2000))[10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1234, 7, 42])
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ", ".join(METHODS))
    ap.add_argument("--workdir", type=Path, help="where the stores go (default: a new temp folder); "
                    "a store of an earlier call there is reused up to the reward model")
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]   # "": only the pipeline to rm, and its table
    if unknown := [m for m in methods if m not in METHODS]:
        sys.exit(f"rl_seeds: unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lineage import Store

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-rl-seeds-"))
    quiet = ["tracking.wandb=disabled"]

    load_before, t_start = os.getloadavg(), time.time()
    rows = []   # (seed, method, sft results, after results, rl seconds)
    rms = {}    # seed -> the rm run's held-out accuracies
    sfts = {}   # seed -> the SFT model's held-out results
    for seed in args.seeds:
        store = work / f"seed-{seed}" / "store"
        if newest(store, "rm") is None:   # a store of an earlier call (--workdir) is reused
            jobs(store, "submit", "tiny", "--stage", "data,pretrain,sft,rm", f"seed={seed}", *quiet)
        rms[seed] = newest(store, "rm").metrics
        sft_model = newest(store, "sft").outputs["model"]
        if newest(store, "eval", model=sft_model) is None:
            jobs(store, "submit", "tiny", "--stage", "eval", "--input", f"model={sft_model}", f"seed={seed}", *quiet)
        sft = sfts[seed] = results(store, sft_model)
        for m in methods:
            t0 = time.perf_counter()
            out = jobs(store, "submit", "tiny", "--stage", "rl", f"seed={seed}", *METHODS[m], *quiet)
            secs = time.perf_counter() - t0
            model = Store(store).run(submitted(out, "rl")).outputs["model"]
            jobs(store, "submit", "tiny", "--stage", "eval", "--input", f"model={model}", f"seed={seed}", *quiet)
            rows.append((seed, m, sft, results(store, model), secs))
            print(f"# seed {seed} {m}: greedy {sft['exact_match']:.3f} -> {rows[-1][3]['exact_match']:.3f}, "
                  f"pass@1 {sft['pass@1']:.4f} -> {rows[-1][3]['pass@1']:.4f} ({secs:.0f} s)", file=sys.stderr, flush=True)

    print(f"# bench/rl_seeds.py  {time.strftime('%Y-%m-%d %H:%M')}  {time.time() - t_start:.0f} s  stores under {work}")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in load_before)}; after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus {os.cpu_count()}")
    print("\n| seed | SFT greedy | SFT pass@1 | SFT pass@8 |\n|---:|---:|---:|---:|")
    for seed, sft in sfts.items():
        print(f"| {seed} | " + " | ".join(f"{sft[k]:.3f}" for k in METRICS) + " |")
    print("\n| seed | method | greedy SFT -> RL | pass@1 SFT -> RL | pass@8 SFT -> RL | rl s (CLI incl.) |")
    print("|---:|---|---|---|---|---:|")
    for seed, m, sft, after, secs in rows:
        cells = [f"{sft[k]:.3f} -> {after[k]:.3f} ({after[k] - sft[k]:+.3f})" for k in METRICS]
        print(f"| {seed} | {m} | " + " | ".join(cells) + f" | {secs:.0f} |")
    print("\n| seed | reward model | its initialisation | gain (pairs) | bootstrap 0.5% of gain | SFT likelihood alone "
          "| head alone (frozen SFT features) | RM on sum / style pairs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for seed, m in rms.items():
        n, low = m["rm/held_out_pairs"], _gain_low(work / f"seed-{seed}" / "store")
        print(f"| {seed} | {m['rm/held_out_accuracy']:.4f} | {m['rm/init_accuracy']:.4f} | "
              f"{m['rm/held_out_accuracy'] - m['rm/init_accuracy']:+.4f} ({round((m['rm/held_out_accuracy'] - m['rm/init_accuracy']) * n):+d}) | "
              f"{low:+.4f} | {m['rm/sft_loglik_accuracy']:.4f} | {m['rm/frozen_head_accuracy']:.4f} | "
              f"{m['rm/sum/held_out_accuracy']:.3f} / {m['rm/style/held_out_accuracy']:.3f} |")
    # The tests' margins, checked on every seed (CI checks them on seed 1234 only).
    sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests"), str(Path(__file__).resolve().parents[1] / "tests" / "stages")]
    from test_rl import MARGINS
    from test_rm import check_beats_baselines

    print("\n| seed | test_rm's claim (trained > its initialisation beyond noise, and the baselines) | "
          "test_rl's margins (greedy / pass@1) |\n|---:|---|---|")
    for seed, m in rms.items():
        store = work / f"seed-{seed}" / "store"
        try:
            with contextlib.redirect_stdout(io.StringIO()):   # the check prints its accuracies
                check_beats_baselines(m, (Store(store).run_dir(newest(store, "rm").id) / "held_out.jsonl").read_text())
            claim = "holds"
        except AssertionError as e:
            claim = f"fails: {str(e).splitlines()[0][:120]}"
        margins = [f"{mm} {'ok' if after['exact_match'] - sft['exact_match'] > MARGINS[mm][0] and after['pass@1'] - sft['pass@1'] > MARGINS[mm][1] else 'UNDER'}"
                   for s, mm, sft, after, _ in rows if s == seed]
        print(f"| {seed} | {claim} | {', '.join(margins) or '-'} |")
    print("\n| method | gain in | mean | smallest | std over seeds |\n|---|---|---:|---:|---:|")
    for m in methods:
        for k in ("exact_match", "pass@1"):
            gains = [after[k] - sft[k] for _, mm, sft, after, _ in rows if mm == m]
            std = statistics.stdev(gains) if len(gains) > 1 else float("nan")
            print(f"| {m} | {'greedy' if k == 'exact_match' else k} | {statistics.mean(gains):+.3f} | "
                  f"{min(gains):+.3f} | {std:.3f} |")


if __name__ == "__main__":
    main()
