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

from stages.megatron.config import BridgeJob, translate

HEADER = """\
# Rendered by jobs (stages/megatron/launch.py) for stage {stage}; runs in the nemo container.
# Megatron-Bridge API as of v0.5.1: megatron.bridge.AutoBridge, ConfigContainer recipes, pretrain/finetune.
"""

IMPORT = HEADER + """\
from megatron.bridge import AutoBridge

# HF -> Megatron checkpoint; the training run loads it through checkpoint.pretrained_checkpoint.
AutoBridge.import_ckpt({hf_model!r}, {megatron_path!r}, trust_remote_code={trust_remote_code!r}, revision={revision!r})
"""

TRAIN = HEADER + """\
import importlib

import torch
from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides


def load(spec):
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


cfg = load({recipe!r})()                       # Nemotron-3-Nano's tuned ConfigContainer
cfg = process_config_with_overrides(cfg, config_filepath={overrides!r})   # ours, in Bridge's field names
load({entry!r})(config=cfg, forward_step_func=forward_step)
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
"""

EXPORT = HEADER + """\
from megatron.bridge import AutoBridge

# The latest iter_* under checkpoint.save -> a HF folder with the input model's config and tokenizer.
bridge = AutoBridge.from_hf_pretrained({hf_model!r}, trust_remote_code={trust_remote_code!r}, revision={revision!r})
bridge.export_ckpt({megatron_path!r}, {hf_path!r})
"""


def render_import(job: BridgeJob) -> str:
    return IMPORT.format(stage=job.stage, hf_model=job.hf_model, megatron_path=job.checkpoint.pretrained_checkpoint,
                         trust_remote_code=job.trust_remote_code, revision=job.hf_revision)


def render_train(job: BridgeJob, overrides_path: str) -> str:
    return TRAIN.format(stage=job.stage, recipe=job.recipe, entry=job.entry, overrides=overrides_path)


def render_export(job: BridgeJob) -> str:
    return EXPORT.format(stage=job.stage, hf_model=job.hf_model, megatron_path=job.checkpoint.save,
                         hf_path=job.hf_export, trust_remote_code=job.trust_remote_code, revision=job.hf_revision)


def overrides_yaml(job: BridgeJob) -> str:
    import yaml

    return yaml.safe_dump(job.overrides(), sort_keys=True)


def torchrun_command(script: Path | str, gpus_per_node: int, nodes: int, node_rank: int, master: str,
                     port: int) -> list[str]:
    return ["torchrun", f"--nproc-per-node={gpus_per_node}", f"--nnodes={nodes}", f"--node-rank={node_rank}",
            f"--master-addr={master}", f"--master-port={port}", str(script)]


def corpus_shards(folder: Path) -> list:
    """Megatron's --data-path list from prep_pretrain's blend: blend.json {"prefix": weight} if
    present, else every *.idx shard with weight 1."""
    blend = folder / "blend.json"
    if blend.exists():
        weights = json.loads(blend.read_text())
        return [x for prefix, w in sorted(weights.items()) for x in (w, str(folder / prefix))]
    return [x for idx in sorted(folder.rglob("*.idx")) for x in (1.0, str(idx.with_suffix("")))]


def prepare(ctx, stage: str, gpus_per_node: int) -> tuple[BridgeJob, dict[str, Path]]:
    """Translate and write the overrides and scripts into the run folder; pure apart from the writes."""
    cfg = ctx.config
    if stage == "pretrain":
        base = cfg.get("base_model", {}) or {}
        hf_model, revision = base.get("hf_model_id") or "", base.get("hf_model_revision")
        data = {"data_path": corpus_shards(ctx.input("corpus")), "tokenizer": str(ctx.input("tokenizer"))}
    else:
        hf_model, revision = str(ctx.input("model")), None
        data = {"dataset_root": str(ctx.input("data"))}
    job = translate(cfg, stage, hf_model=hf_model, data=data, checkpoint_dir=str(ctx.checkpoint_dir),
                    export_dir=str(ctx.run_dir / "outputs" / "model"), log_dir=str(ctx.run_dir),
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
        raise RuntimeError(f"{stage} with backend megatron runs in the pinned nemo container "
                           "(megatron.bridge is not installed here)") from None
    gpus_per_node = int(os.environ.get("SLURM_GPUS_ON_NODE") or os.environ.get("SLURM_GPUS_PER_NODE") or 8)
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
        subprocess.run([sys.executable, str(files["import"])], check=True)
        done.touch()
    _wait_for(done, deadline_s=3 * 3600)

    cmd = torchrun_command(files["train"], gpus_per_node, ctx.dist.world_size, ctx.dist.rank,
                           ctx.dist.master_addr, ctx.dist.master_port)
    proc = subprocess.Popen(cmd)
    stopping = False
    while proc.poll() is None:
        if not stopping and ctx.should_stop():
            # To the workers, not torchrun: torchrun would SIGKILL them 30 s later, mid-save.
            # Bridge's exit-signal handler agrees across ranks, saves, and exits.
            for pid in _children(proc.pid):
                os.kill(pid, signal.SIGTERM)
            stopping = True
        time.sleep(2)
    if stopping:
        ctx.requeue()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)

    if not ctx.dist.is_main:
        return {}
    subprocess.run([sys.executable, str(files["export"])], check=True)
    return {"model": ctx.output_dir("model")}
