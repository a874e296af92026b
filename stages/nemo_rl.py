"""Run nano3's rl stage with NeMo RL inside the `nemo-rl` container (never run here: no GPU).

`rl.backend: nemo_rl`. Our `rl:` section already uses NeMo RL's section names (grpo, loss_fn,
dpo, policy, env, checkpointing), so translation only adds what the job knows and the recipe
cannot: the allocation (cluster), the input paths (policy, data, reward model), where to write
(checkpoints, logs), and drops our own keys (backend, algorithm). Rank 0 runs NeMo RL's driver
script against the Ray cluster the job started (RAY_ADDRESS is set; NeMo RL attaches to it), then
converts the last checkpoint to a HF folder, the stage's `model` output.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Where the NeMo RL checkout lives in the nemo-rl image (v0.4.0.nemotron_3_nano).
REPO = Path("/opt/nemo-rl")
SCRIPTS = {"grpo": "examples/run_grpo_math.py", "dpo": "examples/run_dpo.py"}
OURS = ("backend", "algorithm")


def translate(rl: dict[str, Any], *, policy: Path, prompts: Path, prefs: Path, reward_model: Path,
              nodes: int, gpus_per_node: int, run_dir: Path, wandb: str) -> dict[str, Any]:
    """Our `rl:` section -> a NeMo RL config (plain dict, written as YAML next to the run)."""
    cfg = {k: v for k, v in rl.items() if k not in OURS}
    policy_cfg = dict(cfg["policy"], model_name=str(policy), tokenizer={"name": str(policy)})
    env = dict(cfg.get("env", {}))
    if "reward_model" in env:
        env["reward_model"] = dict(env["reward_model"], model_name=str(reward_model))
    data = ({"train_data_path": str(prompts / "train.jsonl"), "val_data_path": str(prompts / "validation.jsonl")}
            if rl["algorithm"] == "grpo" else
            {"train_data_path": str(prefs / "train.jsonl"), "val_data_path": str(prefs / "validation.jsonl")})
    return {
        **cfg, "policy": policy_cfg, "env": env, "data": data,
        "cluster": {"num_nodes": nodes, "gpus_per_node": gpus_per_node},
        "checkpointing": dict(cfg.get("checkpointing", {}), enabled=True, checkpoint_dir=str(run_dir / "checkpoints" / "nemo_rl")),
        "logger": {"log_dir": str(run_dir / "nemo_rl_logs"), "wandb_enabled": wandb != "disabled",
                   "tensorboard_enabled": True, "wandb": {"project": "jobs-nano3", "name": run_dir.name}},
    }


def command(algorithm: str, config_path: Path, python: str = sys.executable) -> list[str]:
    """The driver command; NeMo RL reads overrides from the config file only (nothing on the line)."""
    return [python, str(REPO / SCRIPTS[algorithm]), "--config", str(config_path)]


def export_command(step_dir: Path, out: Path) -> list[str]:
    """Megatron checkpoint of the last step -> HF folder (NeMo RL's converter)."""
    weights = sorted((step_dir / "policy" / "weights").glob("iter_*"))[-1]
    return [sys.executable, str(REPO / "examples/converters/convert_megatron_to_hf.py"),
            "--config", str(step_dir / "config.yaml"), "--megatron-ckpt-path", str(weights), "--hf-ckpt-path", str(out)]


def preview(config: dict[str, Any], resources: dict[str, Any]) -> str:
    """The rendered NeMo RL config (placeholder paths) and command, and the generation layout."""
    import yaml

    rl = config["rl"]
    runs = Path("<run rl>")
    cfg = translate(rl, policy=Path("<input policy>"), prompts=Path("<input prompts>"), prefs=Path("<input prefs>"),
                    reward_model=Path("<input reward_model>"), nodes=int(resources.get("nodes", 1)),
                    gpus_per_node=int(resources.get("gpus_per_node", 0)), run_dir=runs,
                    wandb=config.get("tracking", {}).get("wandb", "offline"))
    gen = cfg["policy"].get("generation", {})
    vllm = gen.get("vllm_cfg", {})
    layout = (f"generation: {gen.get('backend')} colocated={gen.get('colocated', {}).get('enabled')} "
              f"tensor_parallel_size={vllm.get('tensor_parallel_size')} "
              f"gpu_memory_utilization={vllm.get('gpu_memory_utilization')}; "
              f"cluster: {cfg['cluster']['num_nodes']} nodes x {cfg['cluster']['gpus_per_node']} GPUs")
    return "\n".join([f"rank 0 runs: {' '.join(command(rl['algorithm'], runs / 'nemo_rl.yaml', 'python3'))}", layout,
                      f"{runs / 'nemo_rl.yaml'}:", yaml.safe_dump(cfg, sort_keys=False)])


def run_stage(ctx) -> dict[str, Path]:
    import yaml

    try:
        import nemo_rl  # noqa: F401  (only: is it installed?)
    except ImportError:
        raise RuntimeError("rl with backend nemo_rl runs in the pinned nemo-rl container "
                           "(nemo_rl is not installed here)") from None
    if not ctx.dist.is_main:
        return {}  # the other nodes only host Ray workers
    rl = ctx.config["rl"]
    gpus = int(os.environ.get("SLURM_GPUS_ON_NODE") or os.environ.get("SLURM_GPUS_PER_NODE") or 8)
    cfg = translate(rl, policy=ctx.input("policy"), prompts=ctx.input("prompts"), prefs=ctx.input("prefs"),
                    reward_model=ctx.input("reward_model"), nodes=max(1, len(ctx.dist.nodes)), gpus_per_node=gpus,
                    run_dir=ctx.run_dir, wandb=ctx.config.get("tracking", {}).get("wandb", "offline"))
    path = ctx.run_dir / "nemo_rl.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    # NeMo RL saves by itself before checkpointing.checkpoint_must_save_by and exits; the requeued
    # job resumes from the same checkpoint_dir.
    subprocess.run(command(rl["algorithm"], path), check=True, cwd=REPO)
    steps = sorted(Path(cfg["checkpointing"]["checkpoint_dir"]).glob("step_*"), key=lambda p: int(p.name[5:]))
    if not steps:
        raise RuntimeError(f"NeMo RL wrote no checkpoint under {cfg['checkpointing']['checkpoint_dir']}")
    if int(steps[-1].name[5:]) < rl[rl["algorithm"]]["max_num_steps"]:
        ctx.requeue()  # stopped at its own deadline: resume in the next attempt
    out = ctx.output_dir("model")
    subprocess.run(export_command(steps[-1], out), check=True, cwd=REPO)
    return {"model": out}
