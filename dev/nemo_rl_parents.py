"""Write stages/backends/nemo_rl_parents.yaml: the fields of NeMo RL's parent configs that nano3's rendered
configs inherit through `defaults:` and that the construction checks (stages/backends/nemo_rl_checks.py) or
the drivers read, each with its value and the line it came from, read at a pinned ref of a NeMo RL
checkout. Run by hand (CI has no GitHub):

    python dev/nemo_rl_parents.py /path/to/NeMo-RL-checkout nano-v3 > stages/backends/nemo_rl_parents.yaml

Only the fields under KEEP are written; a parent's own `defaults:` is kept as its `defaults`.
"""
from __future__ import annotations

import subprocess
import sys

import yaml

PARENTS = ("examples/configs/grpo_math_1B.yaml", "examples/configs/grpo_rm_1B.yaml",
           "examples/configs/dpo.yaml", "examples/configs/rm.yaml")
# Dotted prefixes of what the checks and drivers read (a prefix keeps everything below it).
KEEP = (
    "grpo.max_num_epochs", "grpo.max_num_steps", "grpo.batch_multiplier", "grpo.use_dynamic_sampling",
    "grpo.val_period", "grpo.val_at_start", "grpo.val_batch_size", "grpo.num_prompts_per_step",
    "grpo.num_generations_per_prompt", "grpo.async_grpo.enabled",
    "dpo.max_num_epochs", "dpo.max_num_steps", "dpo.val_period", "rm.max_num_epochs", "rm.max_num_steps", "rm.val_period",
    "loss_fn.use_importance_sampling_correction", "loss_fn.use_on_policy_kl_approximation",
    "loss_fn.force_on_policy_ratio", "loss_fn.reference_policy_kl_type",
    "checkpointing.enabled", "checkpointing.metric_name", "checkpointing.higher_is_better", "checkpointing.keep_top_k",
    "checkpointing.checkpoint_must_save_by",
    "policy.train_global_batch_size", "policy.train_micro_batch_size", "policy.precision",
    "policy.dtensor_cfg.enabled", "policy.dtensor_cfg._v2", "policy.dtensor_cfg.tensor_parallel_size",
    "policy.dtensor_cfg.context_parallel_size",
    "policy.megatron_cfg.enabled", "policy.megatron_cfg.tensor_model_parallel_size",
    "policy.megatron_cfg.pipeline_model_parallel_size", "policy.megatron_cfg.context_parallel_size",
    "policy.megatron_cfg.expert_model_parallel_size", "policy.megatron_cfg.moe_router_dtype",
    "policy.megatron_cfg.moe_router_bias_update_rate", "policy.megatron_cfg.defer_fp32_logits",
    "policy.megatron_cfg.moe_aux_loss_coeff", "policy.megatron_cfg.moe_router_enable_expert_bias",
    "policy.dynamic_batching.enabled", "policy.sequence_packing.enabled", "policy.make_sequence_length_divisible_by",
    "policy.logprob_chunk_size", "policy.optimizer.name", "policy.scheduler",
    "policy.generation.backend", "policy.generation.max_new_tokens", "policy.generation.temperature",
    "policy.generation.top_p", "policy.generation.top_k", "policy.generation.stop_token_ids",
    "policy.generation.stop_strings", "policy.generation.vllm_cfg", "policy.generation.colocated",
    "data.prompt_file", "data.system_prompt_file", "data.dataset_name", "data.max_input_seq_length",
    "data.shuffle", "data.num_workers",
    "env.math", "env.reward_model",
    "logger.wandb_enabled", "logger.tensorboard_enabled", "logger.mlflow_enabled", "logger.swanlab_enabled",
    "cluster.gpus_per_node", "cluster.num_nodes",
)


def kept(path: str) -> bool:
    return any(path == k or path.startswith(k + ".") for k in KEEP)


def fields(node, prefix: str = "") -> dict:
    """Leaves (and empty mappings, lists) of a composed YAML mapping: dotted path -> [value, line]."""
    out = {}
    for key_node, value_node in node.value:
        path = f"{prefix}{key_node.value}"
        if isinstance(value_node, yaml.MappingNode) and value_node.value:
            out.update(fields(value_node, path + "."))
        elif kept(path):
            out[path] = [yaml.safe_load(yaml.serialize(value_node)), value_node.start_mark.line + 1]
    return out


def main(checkout: str, ref: str) -> None:
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", ref], capture_output=True, text=True,
                            check=True).stdout.strip()
    parents = {}
    for path in PARENTS:
        text = subprocess.run(["git", "-C", checkout, "show", f"{commit}:{path}"], capture_output=True, text=True,
                              check=True).stdout
        root = yaml.compose(text)
        entry = {"defaults": None, "fields": {}}
        for key_node, value_node in root.value:
            if key_node.value == "defaults":
                entry["defaults"] = yaml.safe_load(yaml.serialize(value_node))
        entry["fields"] = {k: v for k, v in fields(root).items() if k != "defaults"}
        parents[path] = entry
    doc = {"source": f"NVIDIA-NeMo/RL@{commit} ({ref})", "generated_by": "dev/nemo_rl_parents.py",
           "note": "per parent: dotted field -> [value, line in that file at the commit]", "parents": parents}
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None))


if __name__ == "__main__":
    main(*sys.argv[1:3])
