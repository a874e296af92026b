"""Megatron-Bridge's own pretrain and finetune loops for the tiny recipe, through the project's launch
path: `pretrain.backend=megatron` and `sft.backend=megatron` configs composed by jobs/recipes.py,
checked by the stages' check_config, run by stages.pretrain.run / stages.sft.run (so
stages/backends/megatron/launch.py: translate, the rendered scripts, AutoBridge import, torchrun,
export), on one GPU. Run by dev/bridge_gpu.sh, which sets up the interpreter.

    python dev/bridge_gpu.py [--work DIR] [--out DIR] [--iters 40] [--resume-iters 60] [--sft-iters 40]

1. data: the tiny data stage (small counts), then the tiny data in the layouts the megatron backend
   reads: prep_pretrain's (Megatron indexed shards, blend.json / blend_valid.json), prep_sft's
   (training.jsonl / validation.jsonl of {input, output}, bridge.json), and a freshly initialised HF
   Llama of tiny's size with its tokenizer (`base_model.hf_model_id`: what AutoBridge imports and
   the export takes its config from);
2. pretrain for --iters, checkpointing; again to --resume-iters in the same run folder, which
   resumes from checkpoint.load (the second run's first loss continues the first's curve);
3. SFT from pretrain's exported HF model;
4. transformers loads each exported model, and the tiny eval stage scores it on the held-out split.

Without CUDA (a CPU host) it runs step 1, composes and checks both configs, renders the pretrain
stage's scripts (launch.prepare, as run_stage does) and runs the rendered bridge_train.py under
torchrun: Bridge applies our overrides to the recipe, validates the ConfigContainer, and stops at
"Megatron requires CUDA". Exit status: 0 everything ran and passed, 3 the CPU parts passed and the
GPU part was not run, 1 a failure. Prints what it did; --out receives bridge_gpu.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CPU_PARTS_ONLY = 3
RECIPE = "bridge_gpu_recipe:tiny_config"
DATA = ["data.n_corpus_lines=2000", "data.n_sft=1000", "data.n_rl=20", "data.n_eval=200", "data.n_rl_val=20",
        "data.n_prefs=20"]
SEQ = 48          # tiny's pretrain.model.max_len: a corpus line has <= 33 tokens, an SFT row <= 12
LOSS = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|.*?lm loss:\s*([0-9.eE+-]+)")


def megatron_overrides(stage: str, iters: int) -> list[str]:
    """The stage section for backend megatron, in Bridge's own section and field names (as nano3's)."""
    s = stage
    common = [f"~{s}", f"+{s}.backend=megatron", f"+{s}.recipe={RECIPE}",
              f"+{s}.model.seq_length={SEQ}",
              f"+{s}.train.train_iters={iters}", f"+{s}.train.micro_batch_size=16",
              f"+{s}.train.eval_interval=20", f"+{s}.train.eval_iters=2", f"+{s}.train.exit_signal_handler=true",
              f"+{s}.scheduler.lr_decay_style=cosine", f"+{s}.scheduler.lr_decay_iters=100",
              f"+{s}.checkpoint.save_interval=20", f"+{s}.logger.log_interval=5"]
    if stage == "pretrain":
        return common + [f"+{s}.train.global_batch_size=32", f"+{s}.optimizer.lr=3e-3", f"+{s}.optimizer.min_lr=3e-4",
                         f"+{s}.scheduler.lr_warmup_iters=5"]
    return common + [f"+{s}.train.global_batch_size=64", f"+{s}.optimizer.lr=1e-3", f"+{s}.optimizer.min_lr=1e-4",
                     f"+{s}.scheduler.lr_warmup_iters=5", f"+{s}.dataset.packed_sequence=false"]


def write_layouts(work: Path, data: dict, config: dict) -> dict[str, Path]:
    """The tiny data in the megatron backend's layouts, and the HF model pretraining starts from."""
    import shutil

    from stages.ml import formats, indexed, lm
    from stages.prep.pretrain import portable_tokenizer

    blend = work / "blend"
    shutil.copytree(data["tokenizer"], blend / "tokenizer")
    portable_tokenizer(blend / "tokenizer")     # as prep_pretrain writes it: transformers 4 reads it too
    tokenizer = lm.load_tokenizer(blend / "tokenizer")
    docs = formats.pretrain_documents(data["corpus"], tokenizer)
    random.Random(config["seed"]).shuffle(docs)
    cut = len(docs) // 20
    dtype = indexed.dtype_for(len(tokenizer))
    for split, rows in (("valid", docs[:cut]), ("train", docs[cut:])):
        writer = indexed.IndexedWriter(blend / "tiny" / f"{split}_00000", dtype)
        for row in rows:
            writer.add(row)
        writer.close()
        name = "blend.json" if split == "train" else "blend_valid.json"
        (blend / name).write_text(json.dumps({f"tiny/{split}_00000": 1.0}) + "\n")

    sft = work / "sft_data"
    sft.mkdir(parents=True)
    pairs = formats.sft_pairs(data["sft"])
    cut = len(pairs) // 20
    for name, rows in (("validation.jsonl", pairs[:cut]), ("training.jsonl", pairs[cut:])):
        (sft / name).write_text("".join(json.dumps({"input": p["prompt"], "output": p["answer"]}) + "\n" for p in rows))
    # <bos> prompt answer <eos>, the loss on the answer and <eos>: what the torch sft trains on.
    (sft / "bridge.json").write_text(json.dumps({"dataset_kwargs": {
        "prompt_template": "{input}{output}", "label_key": "output", "truncation_field": "input",
        "add_bos": True, "add_eos": True, "answer_only_loss": True}}) + "\n")

    init = work / "init_model"
    model = formats.base_model({}, config["pretrain"]["model"], tokenizer)    # tiny's torch-pretrain size
    lm.save_model(model, tokenizer, init)
    return {"blend": blend, "tokenizer": blend / "tokenizer", "sft": sft, "init": init}


@contextlib.contextmanager
def captured(path: Path):
    """fd 1 and 2 (this process and the ones it starts: torchrun, Bridge) into `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def last_error(text: str) -> str:
    """A worker's exception line from a torchrun log (torchrun's own summary follows it)."""
    errors = [line for line in text.splitlines() if re.match(r"[\w.]+(Error|Exception|Interrupt)\b.*:", line)
              and "ChildFailedError" not in line]
    return errors[-1][:600] if errors else " | ".join(text.strip().splitlines()[-5:])[-600:]


def losses(log: Path) -> list[tuple[int, float]]:
    return [(int(m.group(1)), float(m.group(3))) for m in LOSS.finditer(log.read_text(errors="replace"))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=os.environ.get("BRIDGE_GPU_WORK", "/tmp/bridge_gpu"))
    ap.add_argument("--out", default=os.environ.get("OUT") or None)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--resume-iters", type=int, default=60)
    ap.add_argument("--sft-iters", type=int, default=40)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    import torch
    import transformers

    from jobs import recipes
    from stages.contract import Resources, StageContext

    lines: list[str] = []
    result: dict = {"checks": []}

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    def check(name: str, ok: bool, text: str) -> bool:
        at = round(time.perf_counter() - t_start, 1)
        result["checks"].append({"check": name, "ok": bool(ok), "detail": text, "at_s": at})
        say(f"{'ok    ' if ok else 'FAILED'} {name} (at {at:.0f} s): {text}")
        return ok

    cuda = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if cuda else None
    try:
        import megatron.core
        mcore = f"{megatron.core.__version__} ({Path(megatron.core.__file__).parent})"
    except ImportError as e:
        mcore = f"not importable ({e})"
    result.update(gpu=gpu, torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
                  megatron_core=mcore, python=platform.python_version())
    say(f"bridge_gpu: GPU {gpu or 'none (torch sees no CUDA device)'}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {transformers.__version__}, megatron-core {mcore}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs")

    work = Path(args.work)
    if work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True)
    recipe = recipes.load("tiny")
    common = ["tracking.wandb=disabled", "tracking.tensorboard=true"]
    gpu_res = {**dict(recipe.stages["pretrain"].resources), "gpus_per_node": 1}

    def context(stage: str, name: str, cfg: dict, inputs: dict) -> StageContext:
        (work / name).mkdir(parents=True, exist_ok=True)     # the resume reuses pretrain's
        return StageContext(run_id=f"bridge-gpu-{name}", recipe="tiny", stage=stage, config=cfg, inputs=inputs,
                            run_dir=work / name, resources=Resources(gpus_per_node=1))

    def composed(stage: str, over: list[str]) -> dict:
        cfg = recipes.compose(recipe, stage, common + over)
        module = __import__(recipe.stages[stage].module, fromlist=["check_config"])
        problems = module.check_config(cfg, resources=gpu_res if stage in ("pretrain", "sft") else None)
        if problems:
            raise ValueError(f"{stage}: " + "; ".join(problems))
        return cfg

    def finish(status: int) -> int:
        result["status"] = status
        result["seconds"] = round(time.perf_counter() - t_start, 1)
        ran = [(k, result[k]) for k in ("pretrain", "pretrain_resume", "sft") if k in result]
        if ran:     # what bench/publish.py reads
            say("")
            say("| run | GPU | iterations | seconds | lm loss first -> last | held-out exact match | pass@1 |")
            say("|---|---|---|---|---|---|---|")
            for name, r in ran:
                # the held-out scores are of each stage's last export: the resumed pretrain's, SFT's
                curve, scores = r["curve"], result.get({"pretrain_resume": "eval_pretrain", "sft": "eval_sft"}.get(name), {})
                say(f"| {name} | {gpu} | {curve[0][0] if curve else '-'}-{curve[-1][0] if curve else '-'} | {r['seconds']} | "
                    f"{curve[0][1] if curve else '-'} -> {curve[-1][1] if curve else '-'} | "
                    f"{scores.get('exact_match', '-')} | {scores.get('pass@1', '-')} |")
            say("")
        say(f"bridge_gpu: exit {status} after {result['seconds']} s")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "bridge_gpu.json").write_text(json.dumps({**result, "lines": lines}, indent=1, default=str))
        return status

    # 1. Data, through the tiny data stage, then the megatron backend's layouts.
    try:
        import stages.data

        data_cfg = composed("data", DATA)
        data = stages.data.run(context("data", "data", data_cfg, {}))
        layouts = write_layouts(work, data, recipes.compose(recipe, "pretrain", []))
    except Exception as e:
        traceback.print_exc()
        check("data", False, f"{type(e).__name__}: {e}")
        return finish(1)
    check("data", True, f"tiny data stage, then {layouts['blend']} (indexed shards, blend.json), {layouts['sft']} "
          f"(training.jsonl, bridge.json), {layouts['init']} (HF Llama, tiny's size)")

    # 2. Both stage configs, composed and checked as `jobs submit` does.
    base = [f"+base_model.hf_model_id={layouts['init']}"]
    try:
        pre_cfg = composed("pretrain", megatron_overrides("pretrain", args.iters) + base)
        composed("sft", megatron_overrides("sft", args.sft_iters))
    except Exception as e:
        traceback.print_exc()
        check("configs", False, f"{type(e).__name__}: {e}")
        return finish(1)
    check("configs", True, "tiny pretrain and sft with backend megatron and recipe " + RECIPE
          + ": composed by jobs/recipes.py, check_config passed (1 GPU)")
    pre_inputs = {"corpus": layouts["blend"], "tokenizer": layouts["tokenizer"]}

    if not cuda:
        sft_cfg = composed("sft", megatron_overrides("sft", args.sft_iters))
        # SFT starts from pretrain's export on a GPU; here from the HF model pretraining imports.
        ctxs = [context("pretrain", "pretrain", pre_cfg, pre_inputs),
                context("sft", "sft", sft_cfg, {"model": layouts["init"], "data": layouts["sft"]})]
        return finish(cpu_stop(ctxs, check, say))

    # 3. Pretrain, then resume to more iterations in the same run folder (its checkpoint.load).
    import stages.pretrain
    import stages.sft

    def stage_run(module, stage: str, name: str, cfg: dict, inputs: dict) -> tuple[dict | None, Path, float]:
        log = work / f"{name}.log"
        t0 = time.perf_counter()
        try:
            with captured(log):
                out = module.run(context(stage, name.split("_")[0], cfg, inputs))
        except Exception as e:
            with open(log, "a") as f:
                traceback.print_exc(file=f)
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
            check(name, False, f"{type(e).__name__}: {e}; log {log}: {tail[-600:]}")
            return None, log, time.perf_counter() - t0
        return out, log, time.perf_counter() - t0

    out1, log1, s1 = stage_run(stages.pretrain, "pretrain", "pretrain", pre_cfg, pre_inputs)
    if out1 is None:
        return finish(1)
    curve1 = losses(log1)
    check("pretrain", bool(curve1) and curve1[-1][0] == args.iters,
          f"{args.iters} iterations in {s1:.0f} s (import, torchrun, export); lm loss {curve1[:1]} -> {curve1[-1:]}")
    result["pretrain"] = {"seconds": round(s1, 1), "curve": curve1}
    ckpts = sorted(p.name for p in (work / "pretrain" / "checkpoints" / "megatron").glob("iter_*"))
    check("checkpoints", f"iter_{args.iters:07d}" in ckpts, f"{ckpts}")

    pre2_cfg = composed("pretrain", megatron_overrides("pretrain", args.resume_iters) + base)
    out2, log2, s2 = stage_run(stages.pretrain, "pretrain", "pretrain_resume", pre2_cfg, pre_inputs)
    if out2 is None:
        return finish(1)
    curve2 = losses(log2)
    first = curve1[0][1] if curve1 else float("nan")
    continues = bool(curve2) and curve2[0][0] > args.iters and curve2[-1][0] == args.resume_iters \
        and curve2[0][1] < (first + curve1[-1][1]) / 2
    check("resume", continues, f"second run to {args.resume_iters} in {s2:.0f} s: lm loss {curve2[:1]} -> {curve2[-1:]} "
          f"(the first run: {first:.3f} -> {curve1[-1][1]:.3f})")
    result["pretrain_resume"] = {"seconds": round(s2, 1), "curve": curve2}

    # 4. SFT from pretrain's exported model.
    sft_cfg = composed("sft", megatron_overrides("sft", args.sft_iters))
    out3, log3, s3 = stage_run(stages.sft, "sft", "sft", sft_cfg, {"model": out2["model"], "data": layouts["sft"]})
    if out3 is None:
        return finish(1)
    curve3 = losses(log3)
    check("sft", bool(curve3) and curve3[-1][0] == args.sft_iters,
          f"{args.sft_iters} iterations in {s3:.0f} s: lm loss {curve3[:1]} -> {curve3[-1:]}")
    result["sft"] = {"seconds": round(s3, 1), "curve": curve3}

    # 5. The exports: transformers loads them, the tiny eval stage scores them on the held-out split.
    import stages.eval

    for name, folder in (("pretrain", out2["model"]), ("sft", out3["model"])):
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(folder)
            params = sum(p.numel() for p in model.parameters())
            cfg = composed("eval", ["eval.limit=200", "eval.n_samples=4", "eval.ks=[1,4]", "device=cuda"])
            rep = stages.eval.run(context("eval", f"eval_{name}", cfg, {"model": Path(folder), "data": data["eval"]}))
            scores = json.loads((Path(rep["report"]) / "results.json").read_text())
            result[f"eval_{name}"] = scores
            check(f"export {name}", True, f"{folder}: {type(model).__name__}, {params} parameters; held-out "
                  f"exact_match {scores.get('exact_match')}, pass@1 {scores.get('pass@1')}")
        except Exception as e:
            traceback.print_exc()
            check(f"export {name}", False, f"{type(e).__name__}: {e}")
    return finish(0 if all(c["ok"] for c in result["checks"]) else 1)


def cpu_stop(ctxs: list, check, say) -> int:
    """What a CPU host can run of each stage: launch.prepare (translate, render) as run_stage calls
    it, then the rendered bridge_train.py under the same torchrun command, which must get as far as
    Bridge's CUDA check: pretrain() / finetune() apply our overrides to the recipe and validate the
    ConfigContainer (runtime_config_update) before initialize_megatron asserts CUDA. The stages'
    torchruns run side by side: importing Bridge is most of their time."""
    from stages.backends.megatron import launch

    running = []
    for port, ctx in enumerate(ctxs, start=29551):
        job, files = launch.prepare(ctx, ctx.stage, 1)
        check(f"{ctx.stage} render", files["train"].is_file(),
              f"{files['train']} and {files['overrides'].name}: recipe {job.recipe}"
              f"({', '.join(f'{k}={v}' for k, v in job.recipe_kwargs.items())}) -> {job.entry}, "
              f"Bridge {job.version} field names")
        cmd = launch.torchrun_command(files["train"], 1, 1, 0, "127.0.0.1", port)
        log = ctx.run_dir / "torchrun.log"
        with open(log, "w") as f:
            running.append((ctx.stage, cmd, log, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)))
    failed = 0
    for stage, cmd, log, proc in running:
        code = proc.wait(timeout=600)
        text = log.read_text(errors="replace")
        stopped = "Megatron requires CUDA" in text
        failed += not check(f"{stage} cuda stop", code != 0 and stopped,
                            f"{' '.join(cmd[:2])} ... bridge_train.py exit {code}: "
                            + ("our overrides applied to the recipe, ConfigContainer validated, then Bridge's "
                               "initialize_megatron: AssertionError: Megatron requires CUDA." if stopped
                               else f"did not reach Bridge's CUDA check; log {log}: " + last_error(text)))
    if failed:
        return 1
    say("not run (no CUDA device): the HF -> Megatron import, pretrain and its resume, SFT, the exports and their "
        "held-out scores; run dev/bridge_gpu.sh where a GPU is")
    return CPU_PARTS_ONLY


if __name__ == "__main__":
    sys.exit(main())
