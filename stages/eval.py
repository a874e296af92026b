"""Eval: exact-match accuracy (greedy decoding) and unbiased pass@k (sampled) on the held-out split.

Inputs:  model  (model: a causal LM folder; sft's by default, rl's once that stage exists)
         data   (eval-data: test.jsonl of {"prompt", "answer"}, pairs no training split contains)
Outputs: report (eval-report: results.json with the metrics; samples.jsonl with, per prompt, the
                 greedy completion, the n sampled completions and how many were right)
Launch:  jobs submit tiny --stage eval
Compare: jobs submit tiny --stage eval --input model=tiny/pretrain/model:latest

pass@k = mean over prompts of 1 - C(n-c, k) / C(n, k), with n samples of which c are right (the
unbiased estimator of Chen et al. 2021). The metrics also go to ctx.log (run summary, W&B, TB).
"""
from __future__ import annotations

import json
from math import comb
from pathlib import Path

from stages import lm, tracking
from stages.generate import complete


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is right."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def run(ctx) -> dict[str, Path]:
    cfg = ctx.config["eval"]

    # Fail fast.
    problems = []
    if max(cfg["ks"]) > cfg["n_samples"]:
        problems.append(f"eval.ks {list(cfg['ks'])} needs eval.n_samples >= {max(cfg['ks'])}")
    if cfg["temperature"] <= 0:
        problems.append("eval.temperature must be > 0 (greedy decoding is always reported as exact_match)")
    if problems:
        raise ValueError("eval: " + "; ".join(problems))
    lm.setup_torch(ctx.config["seed"])

    # Setup.
    model = lm.load_model(ctx.input("model")).eval()
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    rows = [json.loads(line) for line in (ctx.input("data") / "test.jsonl").read_text().splitlines()]
    if cfg.get("limit"):
        rows = rows[:cfg["limit"]]
    prompts = [r["prompt"] for r in rows]

    # Generate and score.
    with tracking.session(ctx):
        greedy = complete(model, tokenizer, prompts, cfg["max_new_tokens"])
        sampled = complete(model, tokenizer, prompts, cfg["max_new_tokens"], samples=cfg["n_samples"],
                           temperature=cfg["temperature"], seed=ctx.config["seed"])
        samples, correct = [], []
        for row, g, s in zip(rows, greedy, sampled):
            c = sum(x.strip() == row["answer"] for x in s)
            correct.append(c)
            samples.append({"prompt": row["prompt"], "answer": row["answer"], "greedy": g[0],
                            "greedy_correct": g[0].strip() == row["answer"], "samples": s, "n_correct": c})
        n = cfg["n_samples"]
        results = {
            "n_prompts": len(rows), "n_samples": n, "temperature": cfg["temperature"],
            "exact_match": sum(s["greedy_correct"] for s in samples) / len(rows),
            **{f"pass@{k}": sum(pass_at_k(n, c, k) for c in correct) / len(rows) for k in cfg["ks"]},
        }
        ctx.log({f"eval/{k}": v for k, v in results.items()}, step=0)

    # Output.
    out = ctx.output_dir("report")
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("".join(json.dumps(s, sort_keys=True) + "\n" for s in samples))
    return {"report": out}
