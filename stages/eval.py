"""Eval: exact-match accuracy (greedy) and unbiased pass@k (sampled) on the held-out split.

Inputs:  model (a causal LM folder), data (eval-data: test.jsonl of {"prompt", "answer"})
Outputs: report (results.json with the metrics, samples.jsonl with every prompt's completions)
Launch:  jobs submit tiny --stage eval [--input model=tiny/pretrain/model:latest]
pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k) over n samples with c correct.
"""
from __future__ import annotations

import json
from math import comb
from pathlib import Path

from stages import lm, tracking
from stages.generate import complete


def pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def run(ctx) -> dict[str, Path]:
    cfg = ctx.config["eval"]
    if max(cfg["ks"]) > cfg["n_samples"]:
        raise ValueError(f"eval.ks {cfg['ks']} needs eval.n_samples >= {max(cfg['ks'])}")
    lm.setup_torch(ctx.config["seed"])
    model = lm.load_model(ctx.input("model")).eval()
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    rows = [json.loads(line) for line in (ctx.input("data") / "test.jsonl").read_text().splitlines()]
    if cfg.get("limit"):
        rows = rows[:cfg["limit"]]
    prompts = [r["prompt"] for r in rows]
    trackers = tracking.start(ctx)

    greedy = complete(model, tokenizer, prompts, cfg["max_new_tokens"])
    sampled = complete(model, tokenizer, prompts, cfg["max_new_tokens"], samples=cfg["n_samples"],
                       temperature=cfg["temperature"], seed=ctx.config["seed"])
    samples, hits, correct = [], 0, []
    for row, g, s in zip(rows, greedy, sampled):
        ok = g[0].strip() == row["answer"]
        hits += ok
        c = sum(x.strip() == row["answer"] for x in s)
        correct.append(c)
        samples.append({"prompt": row["prompt"], "answer": row["answer"], "greedy": g[0], "greedy_correct": ok,
                        "samples": s, "n_correct": c})
    results = {"n": len(rows), "exact_match": hits / len(rows), "n_samples": cfg["n_samples"],
               "temperature": cfg["temperature"],
               **{f"pass@{k}": sum(pass_at_k(cfg["n_samples"], c, k) for c in correct) / len(rows) for k in cfg["ks"]}}
    ctx.log({f"eval/{k}": v for k, v in results.items() if isinstance(v, float)}, step=0)
    tracking.stop(trackers)

    out = ctx.output_dir("report")
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("".join(json.dumps(s, sort_keys=True) + "\n" for s in samples))
    return {"report": out}
