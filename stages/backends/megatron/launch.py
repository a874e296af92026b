"""Run a nano3 pretrain/SFT stage with Megatron-Bridge inside the GPU container (never run here).

`run_stage(ctx, stage)` is what stages/pretrain.py and stages/sft.py call for `backend: megatron`:

  1. translate ctx.config -> BridgeJob (config.py), write `bridge_overrides.yaml` and three scripts
     into the run folder (pure rendering: `render_import`, `render_train`, `render_export`);
  2. rank 0 imports the HF checkpoint to a Megatron checkpoint (`AutoBridge.import_ckpt`), unless a
     previous attempt did; the other nodes wait for its marker on the shared filesystem;
  3. every node runs `torchrun ... bridge_train.py` (one Slurm task per node, ctx.dist gives the
     node rank and master): the Bridge recipe + our overrides -> pretrain() / finetune().
     Bridge resumes from `checkpoint.load` by itself. When Slurm's signal arrives
     (ctx.should_stop), torchrun's workers get SIGTERM; with `train.exit_signal_handler` Bridge
     saves and exits, and the stage asks for a requeue;
  4. rank 0 exports the last checkpoint to a HF folder (`AutoBridge.export_ckpt`): the `model` output.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lineage.layout import RunDir
from stages.backends import upstream_run
from stages.backends.megatron.config import BridgeJob, bridge, translate
from stages.contract import GpuBoundary, StageError

HEADER = """\
# Rendered by jobs (stages/backends/megatron/launch.py) for stage {stage}; runs in the nemo container.
# For Megatron-Bridge {version} ({source}): only APIs that exist there.
"""

IMPORT = HEADER + """\
from megatron.bridge import AutoBridge

# HF -> Megatron checkpoint; the training run loads it through checkpoint.pretrained_checkpoint.
AutoBridge.import_ckpt({hf_model!r}, {megatron_path!r}, trust_remote_code={trust_remote_code!r}, revision={revision!r})
"""

# The overrides are applied by this script itself, strictly: Bridge's own loaders skip an unknown
# key with a log line (every version), and some versions lack process_config_with_overrides.
# A `_target_` mapping replaces the whole section (the SFT dataset: never the recipe's SQuAD).
TRAIN = HEADER + """\
import dataclasses
import importlib

import yaml

RECIPE, RECIPE_KWARGS, ENTRY, OVERRIDES = {recipe!r}, {recipe_kwargs!r}, {entry!r}, {overrides!r}


def load(spec):
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def build(spec):
    \"\"\"{{_target_: module.Class, field: value}} -> Class(**fields), nested targets first.\"\"\"
    kwargs = {{k: build(v) if isinstance(v, dict) and "_target_" in v else v for k, v in spec.items() if k != "_target_"}}
    module, _, name = spec["_target_"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


def apply(obj, overrides, where):
    names = {{f.name for f in dataclasses.fields(obj)}}
    for key, value in overrides.items():
        if key not in names:
            raise KeyError(f"{{where}}.{{key}}: {{type(obj).__name__}} has no such field")
        current = getattr(obj, key)
        if isinstance(value, dict) and "_target_" in value:
            setattr(obj, key, build(value))
        elif isinstance(value, dict) and dataclasses.is_dataclass(current):
            apply(current, value, f"{{where}}.{{key}}")
        else:
            setattr(obj, key, value)


def config():
    cfg = load(RECIPE)(**RECIPE_KWARGS)          # Nemotron-3-Nano's tuned ConfigContainer (peft=None: full SFT)
    with open(OVERRIDES) as f:
        apply(cfg, yaml.safe_load(f), "cfg")     # ours, in this Bridge version's field names
    return cfg


if __name__ == "__main__":
    import torch
    from megatron.bridge.training.gpt_step import forward_step

    load(ENTRY)(config=config(), forward_step_func=forward_step)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
"""

EXPORT = HEADER + """\
from megatron.bridge import AutoBridge

# The latest iter_* under checkpoint.save -> a HF folder with the input model's config and tokenizer.
bridge = AutoBridge.from_hf_pretrained({hf_model!r}, trust_remote_code={trust_remote_code!r}, revision={revision!r})
bridge.export_ckpt({megatron_path!r}, {hf_path!r})
"""


def _where(job: BridgeJob) -> dict:
    return {"stage": job.stage, "version": job.version, "source": bridge(job.version)["source"]}


def render_import(job: BridgeJob) -> str:
    return IMPORT.format(**_where(job), hf_model=job.hf_model, megatron_path=job.checkpoint.pretrained_checkpoint,
                         trust_remote_code=job.trust_remote_code, revision=job.hf_revision)


def render_train(job: BridgeJob, overrides_path: str) -> str:
    return TRAIN.format(**_where(job), recipe=job.recipe, recipe_kwargs=job.recipe_kwargs, entry=job.entry,
                        overrides=overrides_path)


def render_export(job: BridgeJob) -> str:
    return EXPORT.format(**_where(job), hf_model=job.hf_model, megatron_path=job.checkpoint.save,
                         hf_path=job.hf_export, trust_remote_code=job.trust_remote_code, revision=job.hf_revision)


def overrides_yaml(job: BridgeJob) -> str:
    import yaml

    return yaml.safe_dump(job.overrides(), sort_keys=True)


def torchrun_command(script: Path | str, gpus_per_node: int, nodes: int, node_rank: int, master: str,
                     port: int) -> list[str]:
    return ["torchrun", f"--nproc-per-node={gpus_per_node}", f"--nnodes={nodes}", f"--node-rank={node_rank}",
            f"--master-addr={master}", f"--master-port={port}", str(script)]


def corpus_shards(folder: Path) -> dict[str, list]:
    """prep_pretrain's blend as {"train": [(prefix, weight), ...], "valid": [...]}: blend.json and
    blend_valid.json ({"prefix": weight}) if present, else every *.idx shard at weight 1 for training."""
    out: dict[str, list] = {"train": [], "valid": []}
    for split, name in (("train", "blend.json"), ("valid", "blend_valid.json")):
        path = folder / name
        if path.exists():
            out[split] = [(str(folder / prefix), w) for prefix, w in sorted(json.loads(path.read_text()).items())]
    if not (folder / "blend.json").exists():
        out["train"] = [(str(idx.with_suffix("")), 1.0) for idx in sorted(folder.rglob("*.idx"))]
    return out


def stage_data(stage: str, inputs: dict[str, Path | str], base_model: dict) -> tuple[str, str | None, dict]:
    """(HF model to start from, its revision, `data` for translate) from the stage's input folders.
    Input folders that do not exist yet (a dry run's placeholders) give placeholder data."""
    if stage == "pretrain":
        corpus = Path(inputs["corpus"])
        shards = corpus_shards(corpus) if corpus.is_dir() else {"train": [(f"{corpus}/<source>/train_00000", 1.0)],
                                                                   "valid": [(f"{corpus}/<source>/valid_00000", 1.0)]}
        return (base_model.get("hf_model_id") or "", base_model.get("hf_model_revision"),
                {**shards, "tokenizer": str(inputs["tokenizer"])})
    root = Path(inputs["data"])
    spec = json.loads((root / "bridge.json").read_text()) if (root / "bridge.json").exists() else None
    if spec is None:   # what prep_sft writes (stages/prep/sft.py), for the dry run's placeholder folder
        spec = {"dataset_kwargs": {"prompt_template": "{input}{output}", "label_key": "output",
                                   "truncation_field": "input", "add_bos": False, "add_eos": False,
                                   "answer_only_loss": True},
                "packed_sequence_specs": {"packed_train_data_path": "packed/training_<P>.npy",
                                          "packed_val_data_path": "packed/validation_<P>.npy",
                                          "packed_metadata_path": "packed/<P>_metadata.jsonl"}}
    return str(inputs["model"]), None, {"dataset_root": str(root), "bridge": spec}


def prepare(ctx, stage: str, gpus_per_node: int) -> tuple[BridgeJob, dict[str, Path]]:
    """Translate and write the overrides and scripts into the run folder; pure apart from the writes."""
    cfg = ctx.config
    roles = ("corpus", "tokenizer") if stage == "pretrain" else ("model", "data")
    hf_model, revision, data = stage_data(stage, {r: ctx.input(r) for r in roles}, cfg.get("base_model", {}) or {})
    job = translate(cfg, stage, hf_model=hf_model, data=data, checkpoint_dir=str(ctx.checkpoint_dir),
                    export_dir=str(RunDir(ctx.run_dir).output("model")), log_dir=str(ctx.run_dir),
                    run_name=f"{stage}-{ctx.run_id}", gpus=gpus_per_node * ctx.dist.world_size, hf_revision=revision)
    folder = ctx.run_dir / "megatron"
    folder.mkdir(parents=True, exist_ok=True)
    files = {"overrides": folder / "bridge_overrides.yaml", "import": folder / "bridge_import.py",
             "train": folder / "bridge_train.py", "export": folder / "bridge_export.py"}
    if ctx.dist.is_main:
        files["overrides"].write_text(overrides_yaml(job))
        files["import"].write_text(render_import(job))
        files["train"].write_text(render_train(job, str(files["overrides"])))
        files["export"].write_text(render_export(job))
    return job, files


def plan(config: dict, stage: str, resources: dict, version: str | None = None) -> BridgeJob:
    """The BridgeJob a submit would run, with placeholder paths: what check_config and the dry run use."""
    roles = ("corpus", "tokenizer") if stage == "pretrain" else ("model", "data")
    hf_model, revision, data = stage_data(stage, {r: f"<input {r}>" for r in roles}, config.get("base_model", {}) or {})
    gpus = int(resources.get("nodes", 1)) * int(resources.get("gpus_per_node", 0) or 0)
    return translate(config, stage, hf_model=hf_model, data=data, checkpoint_dir=f"<run {stage}>/checkpoints",
                     export_dir=f"<run {stage}>/outputs/model", log_dir=f"<run {stage}>", run_name=f"{stage}-<run>",
                     gpus=gpus, hf_revision=revision, version=version)


def check_config(config: dict, stage: str, resources: dict | None) -> list[str]:
    """For `jobs submit`: every problem translate finds, for the version the nemo image carries."""
    from stages.backends.megatron.config import TranslationError

    try:
        plan(config, stage, resources or {})
    except TranslationError as e:
        return [str(e)]
    return []


def check_stage(config: dict, stage: str, resources: dict | None, torch_rules) -> list[str]:
    """`check_config` of a stage with two backends: `backend: megatron` is translated for the
    Megatron-Bridge version the nemo image carries (unknown keys, keys that version lacks, GPU
    layout and batch divisibility against `resources`); `torch` gets `torch_rules(section)`."""
    cfg = config.get(stage)
    if not isinstance(cfg, dict):
        return [f"the config has no {stage}: section"]
    if cfg.get("backend", "torch") == "megatron":
        return check_config(config, stage, resources)
    return torch_rules(cfg)


def notes_stage(config: dict, stage: str, torch_notes) -> list[str]:
    """`notes` of a stage with two backends: a warmup the run shortens, in the backend's own keys."""
    from stages.backends.megatron.config import warmup_notes

    cfg = config.get(stage)
    if not isinstance(cfg, dict):
        return []
    return warmup_notes(cfg, stage) if cfg.get("backend", "torch") == "megatron" else torch_notes(cfg)


def preview_stage(config: dict, stage: str, resources: dict) -> str | None:
    """For `jobs submit --dry-run`: the overrides and recipe a megatron job runs; None for torch."""
    return preview(config, stage, resources) if config[stage].get("backend") == "megatron" else None


def preview(config: dict, stage: str, resources: dict) -> str:
    """For the dry run: the Bridge version, recipe, entry, and the overrides it would apply."""
    job = plan(config, stage, resources)
    return "\n".join([f"Megatron-Bridge {job.version} ({bridge(job.version)['source']})",
                      f"recipe {job.recipe} -> {job.entry}; {job.gpus} GPUs, data parallel {job.data_parallel_size}",
                      f"torchrun ... <run {stage}>/megatron/bridge_train.py applies <run {stage}>/megatron/bridge_overrides.yaml:",
                      overrides_yaml(job)])


class _Elsewhere:
    """A tracker whose metrics Megatron-Bridge writes itself: only its link goes into the record."""

    def log(self, metrics: dict, step: int) -> None:
        pass


def _children(pid: int) -> list[int]:
    """Direct child processes of `pid` (torchrun's workers), from /proc."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _wait_for(path: Path, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear within {deadline_s:.0f} s (rank 0's checkpoint import)")
        time.sleep(5)


def run_stage(ctx, stage: str) -> dict[str, Path]:
    """Import (rank 0), train (every node, under torchrun), export (rank 0); requeue on Slurm's signal."""
    try:
        import megatron.bridge  # noqa: F401
    except ImportError:
        raise StageError(f"{stage} with backend megatron runs in the pinned nemo container "
                           "(megatron.bridge is not installed here)") from None
    gpus_per_node = ctx.resources.gpus_per_node or 8
    job, files = prepare(ctx, stage, gpus_per_node)
    # Bridge logs by itself (LoggerConfig); the run record gets where, W&B stays offline unless asked.
    mode = (ctx.config.get("tracking", {}) or {}).get("wandb", "offline")
    os.environ["WANDB_MODE"] = "disabled" if mode == "disabled" else mode
    if ctx.dist.is_main:
        if job.logger.wandb_save_dir:
            ctx.add_tracker(_Elsewhere(), link=("wandb", f"{job.logger.wandb_save_dir}/wandb"))
        if job.logger.tensorboard_dir:
            ctx.add_tracker(_Elsewhere(), link=("tensorboard", job.logger.tensorboard_dir))
    done = Path(job.checkpoint.pretrained_checkpoint) / ".imported"
    if ctx.dist.is_main and not done.exists():
        upstream_run.run([sys.executable, str(files["import"])])
        done.touch()
    _wait_for(done, deadline_s=3 * 3600)

    cmd = torchrun_command(files["train"], gpus_per_node, ctx.dist.world_size, ctx.dist.rank,
                           ctx.dist.master_addr, ctx.dist.master_port)
    stopping = []

    def watch(proc) -> None:
        if not stopping and ctx.should_stop():
            # To the workers, not torchrun: torchrun would SIGKILL them 30 s later, mid-save.
            # Bridge's exit-signal handler agrees across ranks, saves, and exits.
            for pid in _children(proc.pid):
                os.kill(pid, signal.SIGTERM)
            stopping.append(True)

    try:
        upstream_run.run(cmd, while_running=watch)
    except (subprocess.CalledProcessError, GpuBoundary):
        if not stopping:
            raise
    if stopping:
        ctx.requeue()

    if not ctx.dist.is_main:
        return {}
    upstream_run.run([sys.executable, str(files["export"])])
    return {"model": ctx.output_dir("model")}
