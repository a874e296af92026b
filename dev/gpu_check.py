"""GPU smoke check: the tiny recipe's data, pretrain, SFT, GRPO and eval stages run through the
project's own code (stages/*.run with a StageContext, configs composed by jobs/recipes.py) with
`device=cuda`, and what they did is observed from outside: the device and dtype of every forward
pass of the model (a global module hook), loss curves from each run's metrics.jsonl, held-out
accuracy from the eval stage, and a one-rank NCCL group (all_reduce, a DDP backward).

Ray is not used: the rl stage runs its rollout worker, reward worker and policy trainer in process
(rl.cluster.actors=local), the same classes and the same driver loop as with Ray. Nothing is
recorded in a lineage store (no `jobs submit`); everything is written under the work folder.

    python dev/gpu_check.py [--device cuda|cpu] [--scale full|tiny] [--work DIR] [--out DIR]

Scale `full` keeps the recipe's step counts (400 / 1,000 / 120), so the held-out numbers compare
with README's CPU ones; `tiny` is a few steps of each, to run this script end to end on a CPU.
Prints a table and the checks; writes both to --out (gpu_check.txt, gpu_check.json) when given.
Exit status 1 when a check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TINY = {
    "data": ["data.n_corpus_lines=2000", "data.n_sft=500", "data.n_rl=100", "data.n_eval=40",
             "data.n_rl_val=20", "data.n_prefs=40"],
    "pretrain": ["pretrain.steps=20", "pretrain.warmup=4", "pretrain.log_every=5"],
    "sft": ["sft.steps=20", "sft.warmup=4", "sft.log_every=5", "sft.batch_size=32"],
    # A few SFT steps leave every answer wrong, so every group ties: train on them all, so that the
    # trainer's forward and backward passes run (on the KL term alone).
    "rl": ["rl.grpo.max_num_steps=2", "rl.grpo.num_prompts_per_step=8", "rl.grpo.val_period=1",
           "rl.grpo.max_val_samples=20", "rl.grpo.use_dynamic_sampling=false"],
    "eval": ["eval.limit=20", "eval.n_samples=4", "eval.ks=[1,4]"],
}


class Watch:
    """What each forward pass of a causal LM ran on, counted per stage: (training?, parameter
    device, parameter dtype, logits dtype, autocast on?)."""

    def __init__(self):
        self.stage = None
        self.seen: dict[str, Counter] = {}

    def hook(self, module, args, output):
        if self.stage is None or not type(module).__name__.endswith("ForCausalLM"):
            return
        import torch

        p = next(module.parameters())
        logits = getattr(output, "logits", None)
        auto = p.device.type == "cuda" and torch.is_autocast_enabled("cuda")
        key = ("train" if module.training else "infer", str(p.device.type), str(p.dtype).replace("torch.", ""),
               str(logits.dtype).replace("torch.", "") if logits is not None else "-", "autocast" if auto else "")
        self.seen.setdefault(self.stage, Counter())[key] += 1


def nccl_check(device: str) -> tuple[bool, str]:
    """One rank: the process group (nccl on cuda, gloo on cpu), an all_reduce, a DDP backward."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if device == "cuda" else "gloo"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        x = torch.arange(4.0, device=device)
        dist.all_reduce(x)
        layer = torch.nn.Linear(8, 1).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(layer, **({"device_ids": [0]} if device == "cuda" else {}))
        ddp(torch.ones(2, 8, device=device)).sum().backward()
        ok = x.tolist() == [0.0, 1.0, 2.0, 3.0] and layer.weight.grad is not None and \
            torch.allclose(layer.weight.grad, torch.full_like(layer.weight, 2.0))
        version = torch.cuda.nccl.version() if backend == "nccl" else torch.__version__
        version = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        return ok, f"{backend} {version}: all_reduce and a DDP backward on 1 rank, {time.perf_counter() - t0:.1f}s"
    finally:
        dist.destroy_process_group()


def curve(run_dir: Path, key: str) -> list[float]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r[key] for r in rows if key in r]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=os.environ.get("GPU_CHECK_DEVICE", "cuda"), choices=("cuda", "cpu"))
    ap.add_argument("--scale", default=os.environ.get("GPU_CHECK_SCALE"), choices=("full", "tiny"))
    ap.add_argument("--work", default=os.environ.get("GPU_CHECK_WORK", "/tmp/gpu_check"))
    ap.add_argument("--out", default=os.environ.get("OUT") or None)
    args = ap.parse_args(argv)
    scale = args.scale or ("full" if args.device == "cuda" else "tiny")
    t_start = time.perf_counter()

    import torch
    import transformers

    from jobs import recipes
    from stages.contract import StageContext

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    say(f"gpu_check: device {args.device}, scale {scale}, GPU {gpu}, torch {torch.__version__} "
        f"(CUDA {torch.version.cuda}), transformers {transformers.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, host {socket.gethostname()}")
    checks: list[tuple[str, bool, str]] = []
    if args.device == "cuda" and not torch.cuda.is_available():
        say("FAIL: --device cuda, but torch sees no CUDA device")
        return 1

    try:
        ok, text = nccl_check(args.device)
    except Exception as e:  # reported as a failed check; the stages still run
        ok, text = False, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    checks.append(("process group", ok, text))
    say(f"process group: {'ok' if ok else 'FAILED'} ({text})")

    watch = Watch()
    torch.nn.modules.module.register_module_forward_hook(watch.hook)
    recipe = recipes.load("tiny")
    work = Path(args.work)
    if work.exists():
        import shutil

        shutil.rmtree(work)
    common = ["tracking.wandb=disabled", "tracking.tensorboard=false", f"device={args.device}",
              "rl.cluster.actors=local"]
    outs: dict[str, dict[str, Path]] = {}
    rows: list[dict] = []

    def run(stage: str, name: str, inputs: dict[str, Path], extra: list[str] = ()) -> dict | None:
        over = [o for o in common if o.split("=")[0].split(".")[0] in (stage, "tracking", "device")]
        cfg = recipes.compose(recipe, stage, over + (TINY[stage] if scale == "tiny" else []) + list(extra))
        module = __import__(recipe.stages[stage].module, fromlist=["run"])
        problems = module.check_config(cfg, resources=dict(recipe.stages[stage].resources))
        run_dir = work / name
        run_dir.mkdir(parents=True)
        ctx = StageContext(run_id=f"gpu-check-{name}", recipe="tiny", stage=stage, config=cfg, inputs=inputs,
                           run_dir=run_dir)
        watch.stage = name
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            if problems:
                raise ValueError("; ".join(problems))
            out = module.run(ctx)
            error = None
        except Exception as e:
            traceback.print_exc()
            out, error = None, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        watch.stage = None
        row = {"stage": name, "seconds": round(seconds, 1), "error": error, "run_dir": str(run_dir),
               "forward_passes": {" ".join(k).strip(): v for k, v in sorted(watch.seen.get(name, Counter()).items())},
               "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None,
               "config": cfg}
        rows.append(row)
        say(f"{name}: {'FAILED ' + error if error else 'done'} in {seconds:.1f}s; forward passes {row['forward_passes']}")
        return out

    def held_out(name: str, model: Path) -> dict | None:
        out = run("eval", f"eval_{name}", {"model": model, "data": outs["data"]["eval"]})
        if not out:
            return None
        return json.loads((Path(out["report"]) / "results.json").read_text())

    results: dict[str, dict | None] = {}
    outs["data"] = run("data", "data", {})
    if outs["data"]:
        outs["pretrain"] = run("pretrain", "pretrain", {"corpus": outs["data"]["corpus"],
                                                        "tokenizer": outs["data"]["tokenizer"]})
    if outs.get("pretrain"):
        results["pretrain"] = held_out("pretrain", outs["pretrain"]["model"])
        outs["sft"] = run("sft", "sft", {"model": outs["pretrain"]["model"], "data": outs["data"]["sft"]})
    if outs.get("sft"):
        results["sft"] = held_out("sft", outs["sft"]["model"])
        # GRPO with the exact-match verifier: the reward model input is never read (rl.reward.kind=verifier).
        outs["rl"] = run("rl", "rl", {"policy": outs["sft"]["model"], "prompts": outs["data"]["rl"],
                                      "prefs": outs["data"]["prefs"], "reward_model": work / "no-reward-model"},
                         ["rl.algorithm=grpo", "rl.reward.kind=verifier"])
    if outs.get("rl"):
        results["rl"] = held_out("rl", outs["rl"]["model"])

    # The table.
    by_stage = {r["stage"]: r for r in rows}
    table = []
    for name, key, steps_key in (("pretrain", "pretrain/loss", ("pretrain", "steps")),
                                 ("sft", "sft/loss", ("sft", "steps")),
                                 ("rl", "rl/reward_mean", ("rl", "grpo", "max_num_steps"))):
        r = by_stage.get(name)
        if r is None:
            continue
        cfg = r["config"]
        for k in steps_key:
            cfg = cfg[k]
        values = curve(Path(r["run_dir"]), key)
        train_fw = [k for k in r["forward_passes"] if k.startswith("train")]
        res = results.get(name) or {}
        table.append({
            "stage": "grpo" if name == "rl" else name, "device": args.device,
            "dtype": ", ".join(train_fw) or "-", "steps": cfg, "seconds": r["seconds"],
            "signal": "reward" if name == "rl" else "loss",
            "start": values[0] if values else None, "end": values[-1] if values else None,
            "exact_match": res.get("exact_match"), "pass@1": res.get("pass@1"),
            "peak_gpu_mib": r["peak_gpu_mib"], "error": r["error"],
        })
    say("")
    say("| stage | device | forward passes in training (mode device weights logits) | steps | seconds | "
        "loss (reward for grpo) first -> last | held-out exact match / pass@1 | peak GPU MiB |")
    say("|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)  # noqa: E731
    for t in table:
        say(f"| {t['stage']} | {t['device']} | {t['dtype']} | {t['steps']} | {t['seconds']} | "
            f"{t['signal']} {fmt(t['start'])} -> {fmt(t['end'])} | {fmt(t['exact_match'])} / {fmt(t['pass@1'])} | "
            f"{fmt(t['peak_gpu_mib'])} |" + (f" FAILED: {t['error']}" if t["error"] else ""))
    val = curve(work / "rl", "rl/val_accuracy")
    if val:
        say(f"grpo validation (greedy, held-out prompts): {' -> '.join(f'{v:.3f}' for v in val)}")
    for r in rows:
        if r["stage"].startswith(("eval", "data")):
            say(f"{r['stage']}: {r['seconds']}s" + (f" FAILED: {r['error']}" if r["error"] else "")
                + (f", forward passes {r['forward_passes']}" if r["forward_passes"] else ""))

    # The checks.
    for r in rows:
        checks.append((f"{r['stage']} ran", r["error"] is None, r["error"] or f"{r['seconds']}s"))
    want = {"cuda": ("cuda", "float32", "bfloat16", "autocast"), "cpu": ("cpu", "float32", "float32", "")}[args.device]
    for r in rows:
        if r["stage"] == "data" or r["error"]:
            continue
        train = [k for k in r["forward_passes"] if k.startswith("train")]
        infer = [k for k in r["forward_passes"] if k.startswith("infer")]
        if train or r["stage"] in ("pretrain", "sft", "rl"):
            ok = train == [" ".join(("train",) + want).strip()]
            checks.append((f"{r['stage']} trains on {args.device}", ok, ", ".join(train) or "no training forward pass"))
        if infer:
            ok = all(k.split()[1:3] == [args.device, "float32"] for k in infer)
            checks.append((f"{r['stage']} generates on {args.device}", ok, ", ".join(infer)))
    for t in table:
        if t["stage"] in ("pretrain", "sft") and t["start"] is not None:
            checks.append((f"{t['stage']} loss fell", t["end"] < t["start"], f"{t['start']:.4f} -> {t['end']:.4f}"))
    if scale == "full":
        em = {k: (v or {}).get("exact_match") for k, v in results.items()}
        if None not in (em.get("pretrain"), em.get("sft")):
            checks.append(("sft learns the sums (held-out greedy > 0.35, pretrained < 0.1)",
                           em["sft"] > 0.35 and em["pretrain"] < 0.1, f"{em['pretrain']:.3f} -> {em['sft']:.3f}"))
        if None not in (em.get("sft"), em.get("rl")):
            checks.append(("grpo lifts held-out greedy accuracy by > 0.10", em["rl"] > em["sft"] + 0.10,
                           f"{em['sft']:.3f} -> {em['rl']:.3f}"))
        if len(val) >= 2:
            checks.append(("grpo validation accuracy rose", val[-1] > val[0], f"{val[0]:.3f} -> {val[-1]:.3f}"))
    say("")
    for name, ok, text in checks:
        say(f"{'PASS' if ok else 'FAIL'}  {name}: {text}")
    failed = sum(not ok for _, ok, _ in checks)
    say(f"gpu_check: {len(checks) - failed} passed, {failed} failed, {time.perf_counter() - t_start:.0f}s in all "
        f"(not run: Ray actors, multi-rank DDP, vLLM, Megatron-Bridge)")

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
        (out / "gpu_check.json").write_text(json.dumps(
            {"device": args.device, "scale": scale, "gpu": gpu, "torch": torch.__version__, "table": table,
             "results": results, "checks": [{"name": n, "ok": o, "detail": d} for n, o, d in checks],
             "stages": [{k: v for k, v in r.items() if k != "config"} for r in rows]}, indent=2, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
