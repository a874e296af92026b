"""Render and run the Megatron-Bridge job for one stage inside the GPU container.

`render_script` is pure: it writes the Python that builds the model provider from the HF
checkpoint (AutoBridge), applies the parallel sizes, fills a ConfigContainer, calls
pretrain()/finetune(), and exports the result with `save_hf_pretrained`. `run_stage` runs it with
torchrun on this node; it needs megatron.bridge, which only the pinned `nemo` image has.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stages.megatron.config import BridgeJob, translate

SCRIPT = '''\
# Rendered by jobs (stages/megatron/launch.py); runs inside the nemo container under torchrun.
import json
from megatron.bridge import AutoBridge
from megatron.bridge.training.config import (CheckpointConfig, ConfigContainer, LoggerConfig,
    SchedulerConfig, TrainingConfig)
from megatron.core.optimizer import OptimizerConfig

job = json.loads({job!r})
bridge = AutoBridge.from_hf_pretrained(job["hf_model"], revision=job["hf_revision"],
                                       trust_remote_code=job["trust_remote_code"])
provider = bridge.to_megatron_provider()
for key, value in job["provider"].items():
    setattr(provider, key, value)
provider.seq_length = job["seq_length"]
provider.finalize()
config = ConfigContainer(
    model=provider,
    train=TrainingConfig(**job["train"]),
    optimizer=OptimizerConfig(**job["optimizer"]),
    scheduler=SchedulerConfig(**job["scheduler"]),
    checkpoint=CheckpointConfig(**job["checkpoint"]),
    logger=LoggerConfig(**job["logger"]),
)
if job["mode"] == "pretrain":
    from megatron.bridge.training.pretrain import pretrain as entry
else:
    from megatron.bridge.training.finetune import finetune as entry
from megatron.bridge.training.gpt_step import forward_step
entry(config, forward_step)
bridge.export_ckpt(job["checkpoint"]["save"], job["hf_export"])
'''


def render_script(job: BridgeJob) -> str:
    return SCRIPT.format(job=json.dumps(job.as_dict(), sort_keys=True))


def torchrun_command(script: Path, gpus_per_node: int, nodes: int, rank: int, master: str, port: int) -> list[str]:
    return ["torchrun", f"--nproc-per-node={gpus_per_node}", f"--nnodes={nodes}", f"--node-rank={rank}",
            f"--master-addr={master}", f"--master-port={port}", str(script)]


def run_stage(ctx, stage: str) -> dict[str, Path]:
    """Translate, render, and run under torchrun; the HF export is the stage's model output."""
    try:
        import megatron.bridge  # noqa: F401
    except ImportError:
        raise RuntimeError(f"{stage} with backend megatron runs in the pinned nemo container "
                           "(megatron.bridge is not installed here)") from None
    gpus = int(os.environ.get("SLURM_GPUS_ON_NODE", "8"))
    data = ctx.input("corpus" if stage == "pretrain" else "data")
    model_in = str(ctx.input("model")) if "model" in ctx.inputs else None
    out = ctx.output_dir("model")
    job = translate(ctx.config, stage, data_path=str(data), checkpoint_dir=str(ctx.checkpoint_dir),
                    export_dir=str(out), gpus=gpus * ctx.dist.world_size, hf_model=model_in)
    script = ctx.run_dir / f"megatron_{stage}.py"
    script.write_text(render_script(job))
    cmd = torchrun_command(script, gpus, ctx.dist.world_size, ctx.dist.rank, ctx.dist.master_addr, ctx.dist.master_port)
    subprocess.run(cmd, check=True, stdout=sys.stdout, stderr=sys.stderr)
    return {"model": out} if ctx.dist.is_main else {}
