"""Does tiny's SFT learn the sums whatever the seed? Held-out greedy accuracy of the sft stage per seed.

    .venv/bin/python bench/sft_seeds.py                          # seeds 1234 7 42 99 2024 5, 1 thread each
    .venv/bin/python bench/sft_seeds.py --seeds 1 2 --parallel 1 --threads 2

The data and pretrain stages run once (`jobs submit tiny --stage data,pretrain` in a fresh store, the
recipe's seed); then the sft stage's own code runs once per seed (`seed=S`: batch order only, the
same data and starting model) in a process of its own, and its model answers the 500 held-out
prompts greedily. Per seed: exact match on all prompts, on the sums whose ones digits carry (the
SFT data's slip answers most of those without the carry) and on the rest, and the mean loss of the
first and last five logged steps. A run that never learned the sums ends with the no-carry column
far under 0.9 and the loss near 1; the seed-to-seed spread of a healthy SFT is the table's point.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONE_SEED = r'''
import json, sys
from pathlib import Path
from jobs import recipes
from lineage import Store
from stages import sft
from stages.ml import lm
from stages.contract import Resources, StageContext
from stages.ml.generate import complete

store, seed, run_dir, threads = Store(Path(sys.argv[1])), int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
def newest(stage):
    return store.run(store.index().runs(stage=stage)[0]["id"])
def path(art):
    return Path(store.artifact(art)["path"])
data, pre = newest("data"), newest("pretrain")
config = recipes.compose(recipes.load("tiny"), "sft", [f"seed={seed}", "tracking.wandb=disabled", "tracking.tensorboard=false"])
run_dir.mkdir(parents=True)
ctx = StageContext(run_id=f"sft-seed-{seed}", recipe="tiny", stage="sft", config=config, run_dir=run_dir,
                   resources=Resources(cpus_per_task=threads),  # lm.setup_torch's thread count
                   inputs={"model": path(pre.outputs["model"]), "data": path(data.outputs["sft"])})
out = sft.run(ctx)["model"]
rows = [json.loads(x) for x in (path(data.outputs["eval"]) / "test.jsonl").read_text().splitlines()]
answers = [g[0].strip() for g in complete(lm.load_model(out), lm.load_tokenizer(out), [r["prompt"] for r in rows], 5)]
losses = [json.loads(x)["sft/loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if "sft/loss" in x]
print(json.dumps({"right": [a == r["answer"] for a, r in zip(answers, rows)], "prompts": [r["prompt"] for r in rows],
                  "loss_first": sum(losses[:5]) / 5, "loss_last": sum(losses[-5:]) / 5}))
'''


def carries(prompt: str) -> bool:
    """Whether the held-out prompt "a+b=" is one of the sums the SFT data's slip is about."""
    from stages.data import _carries

    return _carries(*map(int, prompt.rstrip("=").split("+")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1234, 7, 42, 99, 2024, 5])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per SFT run")
    ap.add_argument("--parallel", type=int, default=2, help="SFT runs at once")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sft-seeds-"))
    store = work / "store"
    jobs = str(Path(sys.executable).parent / "jobs")
    r = subprocess.run([jobs, "--store", str(store), "submit", "tiny", "--stage", "data,pretrain",
                        "tracking.wandb=disabled"], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"jobs submit failed:\n{r.stdout}{r.stderr}")

    load_before, t0 = os.getloadavg(), time.time()
    results, pending = {}, list(args.seeds)
    running: dict[int, tuple[subprocess.Popen, float]] = {}
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            running[seed] = (subprocess.Popen([sys.executable, "-c", ONE_SEED, str(store), str(seed), str(work / f"sft-{seed}"), str(args.threads)],
                                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True),
                             time.time())
        time.sleep(1)
        for seed, (p, started) in list(running.items()):
            if p.poll() is not None:
                out = p.stdout.read()
                if p.returncode:
                    sys.exit(f"sft seed {seed} failed (exit {p.returncode}); its folder: {work / f'sft-{seed}'}")
                results[seed] = {**json.loads(out.strip().splitlines()[-1]), "seconds": time.time() - started}
                del running[seed]

    print(f"# bench/sft_seeds.py  {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC  {time.time() - t0:.0f} s  "
          f"{args.threads} thread(s) per run, {args.parallel} at once; store {store}")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in load_before)}; after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus {os.cpu_count()}\n")
    print("| seed | greedy, all | carrying sums | no carry | loss, first 5 logs -> last 5 | s |\n|---:|---:|---:|---:|---|---:|")
    for seed in args.seeds:
        r = results[seed]
        carry = [ok for ok, p in zip(r["right"], r["prompts"]) if carries(p)]
        plain = [ok for ok, p in zip(r["right"], r["prompts"]) if not carries(p)]
        print(f"| {seed} | {sum(r['right']) / len(r['right']):.3f} | {sum(carry) / len(carry):.3f} | "
              f"{sum(plain) / len(plain):.3f} | {r['loss_first']:.3f} -> {r['loss_last']:.3f} | {r['seconds']:.0f} |")


if __name__ == "__main__":
    main()
