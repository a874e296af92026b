"""What NeMo RL does with a rendered config before it trains, done at `jobs submit` instead.

1. `load`: the rendered YAML merged with its `defaults:` parents the way NeMo RL's loader does it
   (nemo_rl/utils/config.py `load_config_with_inheritance`: the `defaults:` entry is popped, each parent
   is loaded recursively — a relative name resolved against the folder of the *top* config, not the
   parent's — merged left to right with OmegaConf.merge, then the child merged over them; interpolations
   such as `${policy.max_total_sequence_length}` resolve against the merged result). The parents' fields
   are data (nemo_rl_parents.yaml, written by dev/nemo_rl_parents.py from the pinned branch, each field
   with its line).
2. `CHECKS`: every assert and refusal NeMo RL's policy, generation, logger, algorithm setup and driver
   make at construction, each with the upstream file and line (at the ref in nemo_rl_parents.yaml) it
   restates. A check is a predicate over the merged config and the job's environment.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Callable

PARENTS = Path(__file__).with_name("nemo_rl_parents.yaml")


@lru_cache(maxsize=1)
def parents() -> dict:
    import yaml

    return yaml.safe_load(PARENTS.read_text())


def _nested(flat: dict) -> dict:
    out: dict = {}
    for path, (value, _line) in flat.items():
        node = out
        *head, last = path.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


class LoadError(Exception):
    """NeMo RL's loader would fail on the config (a parent it cannot find)."""


def _load(name: str, base_dir: PurePosixPath, repo: PurePosixPath, beside: dict[str, str]):
    """One config as NeMo RL's loader sees it; `beside` maps files placed in base_dir to their upstream name."""
    from omegaconf import OmegaConf

    path = PurePosixPath(name) if name.startswith("/") else base_dir / name
    known = parents()["parents"]
    if str(path.parent) == str(base_dir) and path.name in beside:
        upstream = beside[path.name]
    else:
        upstream = str(path.relative_to(repo)) if str(path).startswith(str(repo) + "/") else None
    if upstream not in known:
        raise LoadError(f"NeMo RL's loader would look for the parent config {path}, which is neither in the image "
                        f"({', '.join(str(repo / k) for k in known)}) nor placed beside the config")
    entry = known[upstream]
    conf = OmegaConf.create(_nested(entry["fields"]))
    defaults = entry.get("defaults")
    if defaults:
        base = OmegaConf.create({})
        for d in [defaults] if isinstance(defaults, str) else defaults:
            base = OmegaConf.merge(base, _load(str(d), base_dir, repo, beside))
        conf = OmegaConf.merge(base, conf)
    return conf


def load(cfg: dict, config_path: str, repo: str, beside: dict[str, str] | None = None) -> dict:
    """The merged, resolved config NeMo RL's drivers would get from `config_path` holding `cfg`."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("mul"):      # registered by NeMo RL's drivers (nemo_rl/utils/config.py)
        OmegaConf.register_new_resolver("mul", lambda a, b: a * b)
    child = dict(cfg)
    defaults = child.pop("defaults", None)
    base_dir = PurePosixPath(config_path).parent
    conf = OmegaConf.create({})
    for d in ([defaults] if isinstance(defaults, str) else defaults or []):
        conf = OmegaConf.merge(conf, _load(str(d), base_dir, PurePosixPath(repo), beside or {}))
    conf = OmegaConf.merge(conf, OmegaConf.create(child))
    return OmegaConf.to_container(conf, resolve=True)


def get(c: dict, dotted: str, default=None):
    for part in dotted.split("."):
        if not isinstance(c, dict) or part not in c:
            return default
        c = c[part]
    return c


@dataclass(frozen=True)
class Job:
    """What a check sees: the merged config, the driver kind, and the job's environment."""
    cfg: dict
    kind: str                      # grpo | dpo | rm
    env: dict                      # the environment the driver runs with (what we set)

    def policy_world(self) -> int:
        n, g = get(self.cfg, "cluster.num_nodes", 1), get(self.cfg, "cluster.gpus_per_node", 0)
        if get(self.cfg, "env.reward_model.enabled", False) and self.kind == "grpo":
            rm_n = get(self.cfg, "env.reward_model.resources.num_nodes", 0) or 0
            rm_g = get(self.cfg, "env.reward_model.resources.gpus_per_node", 0) or 0
            return g - rm_g if n == 1 else (n - rm_n) * g
        return n * g

    def layout(self) -> tuple[int, int, int]:
        """(tp, pp, cp) of the training backend lm_policy.py picks."""
        if get(self.cfg, "policy.megatron_cfg.enabled"):
            m = "policy.megatron_cfg."
            return (get(self.cfg, m + "tensor_model_parallel_size", 1), get(self.cfg, m + "pipeline_model_parallel_size", 1),
                    get(self.cfg, m + "context_parallel_size", 1))
        return (get(self.cfg, "policy.dtensor_cfg.tensor_parallel_size", 1), 1,
                get(self.cfg, "policy.dtensor_cfg.context_parallel_size", 1))


@dataclass(frozen=True)
class Check:
    where: str                     # upstream file:line (at the ref in nemo_rl_parents.yaml)
    kinds: tuple[str, ...]         # the drivers that make this check
    refuses: Callable[[Job], bool]
    says: Callable[[Job], str]


def _vllm(j: Job) -> bool:
    return j.kind == "grpo" and get(j.cfg, "policy.generation.backend") == "vllm"


def _v(j: Job, key: str, default=None):
    return get(j.cfg, f"policy.generation.vllm_cfg.{key}", default)


ALL = ("grpo", "dpo", "rm")
LM = "nemo_rl/models/policy/lm_policy.py"
VLLM = "nemo_rl/models/generation/vllm/vllm_generation.py"
GRPO = "nemo_rl/algorithms/grpo.py"
VLLM_REQUIRED = ("backend", "max_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "stop_strings",
                 "vllm_cfg")   # VllmConfig.__required_keys__ (nemo_rl/models/generation/{interfaces.py:118, vllm/config.py:28})

CHECKS: tuple[Check, ...] = (
    Check(f"{LM}:84", ALL,
          lambda j: bool(get(j.cfg, "policy.megatron_cfg.enabled")) and bool(get(j.cfg, "policy.dtensor_cfg.enabled")),
          lambda j: "policy.megatron_cfg.enabled and policy.dtensor_cfg.enabled are both true (the parent config "
                    "enables DTensor: set policy.dtensor_cfg.enabled=false with Megatron)"),
    Check(f"{LM}:104", ALL,
          lambda j: not get(j.cfg, "policy.megatron_cfg.enabled") and not get(j.cfg, "policy.dtensor_cfg.enabled"),
          lambda j: "neither policy.megatron_cfg nor policy.dtensor_cfg is enabled"),
    Check(f"{LM}:126", ALL, lambda j: j.policy_world() < _prod(j.layout()),
          lambda j: f"{j.policy_world()} policy GPUs are fewer than PP*CP*TP = {_prod(j.layout())}"),
    Check(f"{LM}:134", ALL,
          lambda j: j.policy_world() >= _prod(j.layout()) and j.policy_world() % _prod(j.layout()) != 0,
          lambda j: f"{j.policy_world()} policy GPUs are not divisible by PP*CP*TP = {_prod(j.layout())}"),
    Check(f"{LM}:201", ALL, lambda j: bool(get(j.cfg, "policy.dynamic_batching.enabled")) and j.layout()[1] != 1,
          lambda j: "policy.dynamic_batching needs pipeline_model_parallel_size 1"),
    Check(f"{LM}:213", ALL,
          lambda j: bool(get(j.cfg, "policy.dynamic_batching.enabled")) and bool(get(j.cfg, "policy.sequence_packing.enabled")),
          lambda j: "policy.dynamic_batching and policy.sequence_packing are both enabled"),
    Check("nemo_rl/algorithms/dpo.py:129", ("dpo",), lambda j: bool(get(j.cfg, "policy.dynamic_batching.enabled")),
          lambda j: "DPO does not support policy.dynamic_batching"),
    Check("nemo_rl/algorithms/dpo.py:133", ("dpo",), lambda j: bool(get(j.cfg, "policy.sequence_packing.enabled")),
          lambda j: "DPO does not support policy.sequence_packing (set policy.sequence_packing.enabled=false)"),
    Check("nemo_rl/models/policy/workers/megatron_policy_worker.py:754", ALL,
          lambda j: bool(get(j.cfg, "policy.megatron_cfg.enabled")) and get(j.cfg, "policy.logprob_chunk_size") is not None
          and not get(j.cfg, "policy.megatron_cfg.defer_fp32_logits"),
          lambda j: "policy.logprob_chunk_size needs policy.megatron_cfg.defer_fp32_logits=true"),
    Check(f"{GRPO}:225", ("grpo",), lambda j: get(j.cfg, "policy.generation") is None,
          lambda j: "GRPO needs policy.generation"),
    Check(f"{GRPO}:256", ("grpo",),
          lambda j: not get(j.cfg, "grpo.use_dynamic_sampling") and get(j.cfg, "grpo.batch_multiplier", 1) != 1,
          lambda j: "grpo.batch_multiplier > 1 needs grpo.use_dynamic_sampling"),
    Check(f"{GRPO}:282", ("grpo",),
          lambda j: (get(j.cfg, "grpo.val_period", 0) > 0 or bool(get(j.cfg, "grpo.val_at_start")))
          and not (get(j.cfg, "data.val_data_path") or get(j.cfg, "data.val_data_paths")),
          lambda j: "GRPO validation is on (grpo.val_period > 0) but the data has no validation set"),
    Check(f"{GRPO}:319", ("grpo",),
          lambda j: get(j.cfg, "cluster.num_nodes", 1) > 1 and get(j.cfg, "env.reward_model.enabled", False)
          and get(j.cfg, "cluster.num_nodes") - (get(j.cfg, "env.reward_model.resources.num_nodes", 0) or 0) <= 0,
          lambda j: "the reward model's nodes leave no node for the policy"),
    Check(f"{GRPO}:352", ("grpo",),
          lambda j: not get(j.cfg, "policy.generation.colocated.enabled", True)
          and get(j.cfg, "policy.generation.backend") == "megatron",
          lambda j: "non-colocated generation needs the vllm backend"),
    Check(f"{GRPO}:505", ("grpo",),
          lambda j: _vllm(j) and _v(j, "precision") == "fp8" and get(j.cfg, "loss_fn.use_importance_sampling_correction") is not True,
          lambda j: "vLLM fp8 generation needs loss_fn.use_importance_sampling_correction"),
    Check(f"{GRPO}:510", ("grpo",),
          lambda j: _vllm(j) and str(_v(j, "kv_cache_dtype", "auto")).startswith("fp8") and _v(j, "precision") != "fp8",
          lambda j: "an fp8 kv_cache_dtype needs policy.generation.vllm_cfg.precision fp8"),
    Check(f"{GRPO}:609", ("grpo",),
          lambda j: bool(get(j.cfg, "loss_fn.force_on_policy_ratio"))
          and get(j.cfg, "grpo.num_prompts_per_step") * get(j.cfg, "grpo.num_generations_per_prompt")
          != get(j.cfg, "policy.train_global_batch_size"),
          lambda j: "loss_fn.force_on_policy_ratio needs train_global_batch_size == prompts x generations"),
    Check(f"{GRPO}:1570", ALL,
          lambda j: get(j.cfg, "checkpointing.metric_name") is not None
          and not str(get(j.cfg, "checkpointing.metric_name")).startswith(("val:", "train:")),
          lambda j: f"checkpointing.metric_name {get(j.cfg, 'checkpointing.metric_name')!r} must start with val: or train:"),
    Check("nemo_rl/algorithms/dpo.py:374", ("dpo",),
          lambda j: get(j.cfg, "dpo.val_period", 0) != 0 and not get(j.cfg, "data.val_data_paths"),
          lambda j: "DPO validation is on (dpo.val_period) but the data has no validation set"),
    Check("nemo_rl/algorithms/rm.py:314", ("rm",), lambda j: not get(j.cfg, "data.val_data_paths"),
          lambda j: "the RM trainer needs validation data (without it rm.py reads dpo.val_period, absent in an RM config)"),
    Check(f"{VLLM}:63", ("grpo",),
          lambda j: _vllm(j) and j.policy_world() % (_v(j, "tensor_parallel_size", 1) * _v(j, "pipeline_parallel_size", 1)) != 0,
          lambda j: f"{j.policy_world()} GPUs are not a multiple of vLLM's TP*PP"),
    Check(f"{VLLM}:70", ("grpo",),
          lambda j: _vllm(j) and _v(j, "pipeline_parallel_size", 1) > 1 and not _v(j, "async_engine"),
          lambda j: "vLLM pipeline_parallel_size > 1 needs vllm_cfg.async_engine"),
    Check(f"{VLLM}:77", ("grpo",),
          lambda j: _vllm(j) and _v(j, "expert_parallel_size", 1) > 1
          and _v(j, "expert_parallel_size", 1) % _v(j, "tensor_parallel_size", 1) != 0,
          lambda j: "vLLM expert_parallel_size must be a multiple of tensor_parallel_size"),
    Check(f"{VLLM}:81", ("grpo",),
          lambda j: _vllm(j) and _v(j, "expert_parallel_size", 1) > 1
          and _v(j, "expert_parallel_size", 1) != _v(j, "tensor_parallel_size", 1) and bool(_v(j, "async_engine")),
          lambda j: "vLLM data parallelism inside an engine (EP != TP) needs vllm_cfg.async_engine=false"),
    Check(f"{VLLM}:93", ("grpo",),
          lambda j: _vllm(j) and get(j.cfg, "policy.generation.top_k") not in (None, -1)
          and get(j.cfg, "policy.generation.top_k") < 8000,
          lambda j: f"policy.generation.top_k {get(j.cfg, 'policy.generation.top_k')} < 8000 (vLLM returns no logprobs after top-k)"),
    Check(f"{VLLM}:105", ("grpo",), lambda j: _vllm(j) and get(j.cfg, "policy.generation.top_p", 1.0) < 0.99,
          lambda j: f"policy.generation.top_p {get(j.cfg, 'policy.generation.top_p')} < 0.99 (vLLM returns no logprobs after top-p)"),
    Check(f"{VLLM}:124", ("grpo",),
          lambda j: _vllm(j) and any(k not in (get(j.cfg, "policy.generation") or {}) for k in VLLM_REQUIRED),
          lambda j: "policy.generation lacks " + ", ".join(k for k in VLLM_REQUIRED if k not in get(j.cfg, "policy.generation"))),
    Check("examples/run_grpo_math.py:79", ("grpo",),
          lambda j: any(k not in (get(j.cfg, "data") or {}) for k in ("prompt_file", "system_prompt_file",
                                                                      "max_input_seq_length", "dataset_name")),
          lambda j: "data lacks a key the driver reads: prompt_file, system_prompt_file, max_input_seq_length, dataset_name"),
    Check("nemo_rl/utils/logger.py:857", ALL,
          lambda j: bool(get(j.cfg, "logger.wandb_enabled")) and j.env.get("WANDB_MODE") not in ("offline", "disabled")
          and "WANDB_API_KEY" not in j.env,
          lambda j: "logger.wandb_enabled with neither WANDB_MODE=offline nor WANDB_API_KEY in the job: wandb.init "
                    "fails without a key"),
)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def problems(job: Job) -> list[str]:
    """Every refusal NeMo RL would make, as 'what (upstream file:line)'."""
    out = []
    for c in CHECKS:
        if job.kind not in c.kinds:
            continue
        try:
            refused = c.refuses(job)
        except (TypeError, KeyError) as e:   # a value of the wrong type where NeMo RL does arithmetic
            out.append(f"NeMo RL would fail at {c.where}: {type(e).__name__} {e}")
            continue
        if refused:
            out.append(f"{c.says(job)} (NeMo RL refuses at {c.where})")
    return out
