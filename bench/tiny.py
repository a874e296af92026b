"""The tiny pipeline as a new user runs it: per-stage wall time and the held-out results.

    .venv/bin/python bench/tiny.py                 # a fresh store: `jobs submit tiny --stage all`,
                                                   # then eval of the pretrained and SFT models
    .venv/bin/python bench/tiny.py --store DIR     # the same table for a store where that ran
    .venv/bin/python bench/tiny.py --dpo           # also rl.algorithm=dpo (on-policy) and its eval

Stage times are the run records' own (RUNNING -> SUCCEEDED, so queueing and the CLI's start are
not counted; the total wall time of the submit is printed apart). Held-out numbers are the eval
stage's results.json (500 pairs never trained on) and the reward model's recorded metrics. The
README's and recipes/tiny/README.md's tables are this script's output.
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

JOBS = str(Path(sys.executable).parent / "jobs")


def jobs(store: Path, *args: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([JOBS, "--store", str(store), *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"jobs {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return time.perf_counter() - t0


def stage_seconds(store, run_id: str) -> float | None:
    """From the last RUNNING to SUCCEEDED in the run's events (one attempt when nothing requeued)."""
    events = [e for e in store.events(run_id) if e.get("kind") == "status"]
    start = [e["time"] for e in events if e.get("state") == "RUNNING"]
    end = [e["time"] for e in events if e.get("state") == "SUCCEEDED"]
    return end[-1] - start[-1] if start and end else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="read a store where the pipeline already ran")
    ap.add_argument("--dpo", action="store_true", help="also run rl.algorithm=dpo and evaluate it")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lineage import Store

    load_before = os.getloadavg()
    walls = {}
    store_root = args.store
    if store_root is None:
        store_root = Path(tempfile.mkdtemp(prefix="bench-tiny-")) / "store"
        walls["submit tiny --stage all"] = jobs(store_root, "submit", "tiny", "--stage", "all")
        for upstream in ("pretrain", "sft"):
            walls[f"eval of {upstream}"] = jobs(store_root, "submit", "tiny", "--stage", "eval", "--input",
                                                f"model=tiny/{upstream}/model:latest", "tracking.wandb=disabled")
    if args.dpo:
        walls["rl dpo + eval"] = jobs(store_root, "submit", "tiny", "--stage", "rl,eval", "rl.algorithm=dpo",
                                      "tracking.wandb=disabled")
    store = Store(store_root)
    idx = store.index()
    rows = [store.run(r["id"]) for r in reversed(idx.runs(recipe="tiny"))]
    rows = [v for v in rows if v.state == "SUCCEEDED"]

    print(f"# bench/tiny.py  {time.strftime('%Y-%m-%d %H:%M')}  store {store_root}")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in load_before)}; after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus {os.cpu_count()}")
    print("\n| stage run | config | seconds (RUNNING -> SUCCEEDED) |\n|---|---|---|")
    for v in rows:
        algo = v.spec["config"].get("rl", {}).get("algorithm", "") if v.spec["stage"] == "rl" else ""
        secs = stage_seconds(store, v.id)
        print(f"| {v.spec['stage']} {v.id[-8:]} | {algo} | {secs:.0f} |" if secs is not None else f"| {v.spec['stage']} | {algo} | - |")
    for what, secs in walls.items():
        print(f"| `jobs {what}` (wall, CLI included) | | {secs:.0f} |")
    exports = [v for v in rows if v.spec["stage"] == "export"]
    if rows and exports:   # the chain of `--stage all`: its first record to its export's end
        end = [e["time"] for e in store.events(exports[0].id) if e.get("state") == "SUCCEEDED"][-1]
        print(f"| whole chain, data recorded -> export SUCCEEDED | | {end - rows[0].spec['created']:.0f} |")

    print("\n| model | greedy exact match | pass@1 | pass@4 | pass@8 |\n|---|---|---|---|---|")
    for v in rows:
        if v.spec["stage"] != "eval":
            continue
        producer = store.artifact(v.inputs["model"]).get("producer")
        up = store.run(producer) if producer else None
        name = up.spec["stage"] if up else "?"
        if up is not None and up.spec["stage"] == "rl":
            name += f" ({up.spec['config'].get('rl', {}).get('algorithm', 'grpo')})"
        res = json.loads((Path(store.artifact(v.outputs["report"])["path"]) / "results.json").read_text())
        cols = [res.get(k) for k in ("exact_match", "pass@1", "pass@4", "pass@8")]
        print(f"| {name} | " + " | ".join(f"{c:.4g}" if isinstance(c, (int, float)) else "-" for c in cols) + " |")

    rm = [v for v in rows if v.spec["stage"] == "rm"]
    if rm:
        print("\n| reward model metric (held-out pairs) | value |\n|---|---|")
        for k, val in sorted(rm[-1].metrics.items()):
            if isinstance(val, (int, float)) and ("accuracy" in k or "margin" in k):
                print(f"| {k} | {val:.4g} |")


if __name__ == "__main__":
    main()
