"""Run nano3's rl and rm stages with NeMo RL inside the `nemo-rl` container (never run here: no GPU).

`rl.backend: nemo_rl` / `rm.backend: nemo_rl`. Our sections already use NeMo RL's section names
(grpo, loss_fn, dpo, rm, policy, env, checkpointing), so translation adds what the job knows and
the recipe cannot: the parent config (`defaults:` examples/configs/*.yaml in the image, which
fills every key we do not set), the data keys the driver reads, the allocation (cluster), input
paths, where to write; and drops our own keys (backend, algorithm) and the other algorithm's
sections. Every key is checked at submit against the MasterConfig of the NeMo RL version the
image carries (containers.lock -> upstream_fields.yaml), and the config merged with its parent as
NeMo RL's loader merges it must pass every refusal NeMo RL makes at construction
(stages/backends/nemo_rl_checks.py). Drivers: run_grpo_math.py (env: math), run_grpo_rm.py (env:
reward_model), run_dpo.py, run_rm.py. Rank 0 runs the driver, under the job's own Python and from the
checkout that Python imports nemo_rl from (`checkout`: the image's /opt/nemo-rl), against the Ray cluster
the job started (RAY_ADDRESS is set; NeMo RL attaches to it) with W&B offline unless tracking says
online. A driver that ends at its refusal to go on without GPUs raises GpuBoundary (the run's class
gpu_boundary, with NeMo RL's file and line); requeues
only while the driver's own end (max_num_steps or max_num_epochs, whichever first) is not reached;
then converts the best step by checkpointing.metric_name to a HF folder, the stage's output.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage.layout import RunDir
from stages.backends import upstream_run
from stages.contract import StageError

#: Where the NeMo RL checkout lives in the nemo-rl image (v0.4.0.nemotron_3_nano).
REPO = Path("/opt/nemo-rl")
#: The image's Python with megatron.bridge: its default venv has none (docker/Dockerfile's last `uv sync`
#: leaves the mcore extra out; NeMo RL's README runs the converter with `uv run --extra mcore`). The
#: image's build (prefetch_venvs.py) makes the Megatron policy worker's venv, that extra, and this wrapper.
MCORE_PYTHON = "/usr/local/bin/python-MegatronPolicyWorker"
OURS = ("backend", "algorithm")


@dataclass(frozen=True)
class Driver:
    script: str      # examples/run_*.py in the image
    defaults: str    # the parent YAML our config inherits (NeMo RL's load_config `defaults:`)
    keys: str        # which MasterConfig's key list in upstream_fields.yaml applies
    # Files of the image copied beside our config before the run: NeMo RL's loader resolves a parent's
    # own relative `defaults:` against the folder of the top config (nemo_rl/utils/config.py:63).
    beside: tuple[str, ...] = ()


# Which driver runs what. run_grpo_math.py sends every prompt to the math env and run_grpo_rm.py
# every prompt to the reward model env: a mix of the two has no driver at NeMo RL nano-v3.
DRIVERS = {
    "grpo/math": Driver("examples/run_grpo_math.py", "examples/configs/grpo_math_1B.yaml", "grpo"),
    "grpo/reward_model": Driver("examples/run_grpo_rm.py", "examples/configs/grpo_rm_1B.yaml", "grpo",
                                ("examples/configs/grpo_math_1B.yaml",)),
    "dpo": Driver("examples/run_dpo.py", "examples/configs/dpo.yaml", "dpo"),
    "rm": Driver("examples/run_rm.py", "examples/configs/rm.yaml", "rm"),
}
# Keys the data loaders read beyond the DataConfig TypedDict (nemo_rl/data/datasets/*/__init__.py
# at nano-v3 and v0.4.0: get_extra_kwargs(data_config, ["val_data_path", "input_key", ...])).
LOADER_KEYS = ("data.val_data_path", "data.train_split", "data.val_split",
               # read by the Megatron policy worker but absent from its MegatronConfig TypedDict
               # (nemo_rl/models/policy/workers/megatron_policy_worker.py:675-690 at nano-v3)
               "policy.megatron_cfg.moe_router_dtype", "policy.megatron_cfg.moe_router_bias_update_rate",
               "policy.megatron_cfg.moe_router_load_balancing_type", "policy.megatron_cfg.moe_permute_fusion")
VAL_NAME = "heldout"   # our val_data_paths name: DPO/RM validation metrics are val:validation-heldout_<metric>


class NemoRLError(StageError):
    """The stage config cannot become a NeMo RL run; the message lists every problem."""


def version() -> str:
    """The NeMo RL the nemo-rl image carries (containers.lock), whose key list upstream_fields.yaml has."""
    from stages.backends.megatron.config import TranslationError, image_version

    try:
        return image_version("nemo-rl", "nemo_rl")
    except TranslationError as e:
        raise NemoRLError(str(e)) from None


def upstream(ver: str) -> dict:
    from stages.backends.megatron.config import upstream as fields

    versions = fields()["nemo_rl"]
    if ver not in versions:
        raise NemoRLError(f"NeMo RL {ver!r} has no key list in upstream_fields.yaml (known: {', '.join(versions)})")
    return versions[ver]


def driver_for(kind: str, env: dict | None = None) -> Driver:
    """`kind`: grpo, dpo or rm. GRPO picks its driver by the one environment the config runs."""
    if kind != "grpo":
        return DRIVERS[kind]
    names = sorted(env or {})
    if len(names) != 1 or f"grpo/{names[0]}" not in DRIVERS:
        raise NemoRLError(f"rl.env must name exactly one of math, reward_model (got {', '.join(names) or 'none'}): "
                          "NeMo RL nano-v3's run_grpo_math.py scores every prompt with the math verifier and "
                          "run_grpo_rm.py every prompt with the reward model, so a mix would be mis-scored")
    return DRIVERS[f"grpo/{names[0]}"]


def _type_problem(annotation: str, value) -> str | None:
    """Whether `value` fits a TypedDict annotation's scalar types (int, float, bool, str, None);
    annotations naming anything else (dicts, lists, Literal, other TypedDicts) are not checked."""
    import re

    words = set(re.findall(r"[A-Za-z_]+", annotation)) - {"NotRequired", "Optional", "Union", "Required"}
    if not words or not words <= {"int", "float", "bool", "str", "None"}:
        return None
    ok = ((value is None and ("None" in words or "Optional" in annotation))
          or (isinstance(value, bool) and "bool" in words)
          or (isinstance(value, int) and not isinstance(value, bool) and words & {"int", "float"})
          or (isinstance(value, float) and "float" in words)
          or (isinstance(value, str) and "str" in words))
    return None if ok else f"must be {annotation} (got {value!r})"


def unknown_keys(cfg: dict, drv: Driver, ver: str, where: str) -> list[str]:
    """Key paths of `cfg` that NeMo RL `ver`'s MasterConfig (and data loaders) do not have, and
    values whose type its annotation refuses. A key under a known leaf that holds a mapping
    (a dict-typed field such as vllm_kwargs or env) is accepted."""
    import difflib

    known = {**upstream(ver)["drivers"][drv.keys]["keys"], **{k: None for k in LOADER_KEYS}}

    def walk(d: dict, prefix: str) -> list[str]:
        out = []
        for key, value in d.items():
            path = f"{prefix}{key}"
            name = path if path.split(".")[0] == where else f"{where}.{path}"   # rm's own keys sit under rm.
            if path not in known:
                near = difflib.get_close_matches(path, sorted(known), n=2)
                out.append(f"{name}: NeMo RL {ver} has no such key" + (f" (did you mean {', '.join(near)}?)" if near else ""))
            elif known[path] is None and isinstance(value, dict):
                out += walk(value, f"{path}.")
            elif known[path] is not None:
                problem = _type_problem(known[path], value)
                if problem:
                    out.append(f"{name} {problem}")
        return out

    return walk({k: v for k, v in cfg.items() if k != "defaults"}, "")


def _policy(section: dict, model: Path, kind: str) -> dict:
    """Our policy section as NeMo RL reads it. With Megatron on, sequences are padded to a multiple of
    its TP (the parents pad to DTensor's TP). DPO refuses sequence packing (dpo.py:133): DPO runs
    unpacked whatever the shared rl.policy says."""
    pol = dict(section, model_name=str(model), tokenizer={"name": str(model)})
    mcfg = pol.get("megatron_cfg") or {}
    if mcfg.get("enabled"):
        pol.setdefault("make_sequence_length_divisible_by", mcfg.get("tensor_model_parallel_size", 1))
    if kind == "dpo":
        pol["sequence_packing"] = dict(pol.get("sequence_packing") or {}, enabled=False)
    return pol


def job_env(wandb: str) -> dict[str, str]:
    """The driver's environment: W&B offline writes under the run folder and needs no API key."""
    return {"WANDB_MODE": "offline"} if wandb == "offline" else {}


def _common(nodes: int, gpus_per_node: int, run_dir: Path, wandb: str, checkpointing: dict) -> dict:
    return {
        "cluster": {"num_nodes": nodes, "gpus_per_node": gpus_per_node},
        "checkpointing": dict(checkpointing, enabled=True, checkpoint_dir=str(RunDir(run_dir).checkpoints / "nemo_rl")),
        "logger": {"log_dir": str(run_dir / "nemo_rl_logs"), "wandb_enabled": wandb != "disabled",
                   "tensorboard_enabled": True, "wandb": {"project": "jobs-nano3", "name": run_dir.name}},
    }


def translate(rl: dict[str, Any], *, policy: Path, prompts: Path, prefs: Path, reward_model: Path,
              nodes: int, gpus_per_node: int, run_dir: Path, wandb: str, repo: Path = REPO) -> tuple[Driver, dict[str, Any]]:
    """Our `rl:` section -> (driver, NeMo RL config): the parent YAML in `defaults:`, the sections of
    the chosen algorithm only, and the data keys its driver reads."""
    algorithm = rl["algorithm"]
    policy_cfg = _policy(rl["policy"], policy, algorithm)
    seq = policy_cfg.get("max_total_sequence_length")
    if algorithm == "grpo":
        drv = driver_for("grpo", rl.get("env"))
        env = {k: dict(v) for k, v in rl["env"].items()}
        if "reward_model" in env:
            env["reward_model"].update(enabled=True, model_name=str(reward_model), tokenizer={"name": str(reward_model)},
                                       checkpoint_path=None)
        sections = {"grpo": rl["grpo"], "loss_fn": rl.get("loss_fn", {}), "env": env}
        data = {"dataset_name": "ResponseDataset", "train_data_path": str(prompts / "train.jsonl"),
                "val_data_path": str(prompts / "validation.jsonl"), "input_key": "prompt", "output_key": "answer",
                "prompt_file": None, "system_prompt_file": None, "max_input_seq_length": seq}
    else:
        drv = driver_for("dpo")
        sections = {"dpo": rl["dpo"]}
        data = {"dataset_name": "PreferenceDataset", "train_data_path": str(prefs / "train.jsonl"),
                "val_data_paths": {VAL_NAME: str(prefs / "validation.jsonl")}, "max_input_seq_length": seq}
    cfg = {"defaults": str(repo / drv.defaults), **sections, "policy": policy_cfg, "data": data,
           **_common(nodes, gpus_per_node, run_dir, wandb, rl.get("checkpointing", {}))}
    return drv, cfg


def translate_rm(rm: dict[str, Any], *, model: Path, prefs: Path, nodes: int, gpus_per_node: int, run_dir: Path,
                 wandb: str, repo: Path = REPO) -> tuple[Driver, dict[str, Any]]:
    """Our `rm:` section (NeMo RL's `rm:` keys plus `policy` and `checkpointing`) -> run_rm.py's config."""
    drv = driver_for("rm")
    own = {k: v for k, v in rm.items() if k not in OURS + ("policy", "checkpointing")}
    policy_cfg = _policy(rm["policy"], model, "rm")
    policy_cfg["reward_model_cfg"] = dict(policy_cfg.get("reward_model_cfg", {}), enabled=True)
    data = {"dataset_name": "PreferenceDataset", "train_data_path": str(prefs / "train.jsonl"),
            "val_data_paths": {VAL_NAME: str(prefs / "validation.jsonl")},
            "max_input_seq_length": policy_cfg.get("max_total_sequence_length")}
    cfg = {"defaults": str(repo / drv.defaults), "rm": own, "policy": policy_cfg, "data": data,
           **_common(nodes, gpus_per_node, run_dir, wandb, rm.get("checkpointing", {}))}
    return drv, cfg


def command(drv: Driver, config_path: Path, python: str = sys.executable, repo: Path = REPO) -> list[str]:
    """The driver command; NeMo RL reads overrides from the config file only (nothing on the line)."""
    return [python, str(repo / drv.script), "--config", str(config_path)]


def checkout() -> Path:
    """The NeMo RL checkout whose drivers the job runs: the one this Python imports nemo_rl from (the
    image: /opt/nemo-rl, its Dockerfile's; the CPU twin: its own copy of the same commit), else REPO."""
    try:
        import nemo_rl
    except ImportError:   # a Python without it: the driver's own start says so, from the image's path
        return REPO
    here = Path(nemo_rl.__file__).resolve().parents[1]
    return here if (here / "examples").is_dir() else REPO


def export_command(step_dir: Path, out: Path, megatron: bool = True, repo: Path = REPO) -> list[str]:
    """The last step's checkpoint -> HF folder (NeMo RL's converters: Megatron, in the image's Python that
    has megatron.bridge, or DCP/DTensor, in its default Python)."""
    if megatron:
        weights = sorted((step_dir / "policy" / "weights").glob("iter_*"))[-1]
        return [MCORE_PYTHON, str(repo / "examples/converters/convert_megatron_to_hf.py"),
                "--config", str(step_dir / "config.yaml"), "--megatron-ckpt-path", str(weights), "--hf-ckpt-path", str(out)]
    return [sys.executable, str(repo / "examples/converters/convert_dcp_to_hf.py"), "--config", str(step_dir / "config.yaml"),
            "--dcp-ckpt-path", str(step_dir / "policy" / "weights"), "--hf-ckpt-path", str(out)]


def export(step_dir: Path, out: Path, megatron: bool = True, repo: Path = REPO) -> None:
    """The step's checkpoint -> HF folder `out`, by NeMo RL's converter (export_command). The Megatron one
    writes `out` itself and refuses one that exists (community_import.py export_model_from_megatron:
    FileExistsError unless overwrite=True, which its script never passes): the stage's output folder,
    fresh or left by an earlier attempt, is removed first."""
    import shutil

    if megatron and out.exists():
        shutil.rmtree(out)
    upstream_run.run(export_command(step_dir, out, megatron=megatron, repo=repo), cwd=repo, env=dict(os.environ))


def _placeholders(stage: str, resources: dict, config: dict) -> dict:
    return {"nodes": int(resources.get("nodes", 1)), "gpus_per_node": int(resources.get("gpus_per_node", 0) or 0),
            "run_dir": Path(f"<run {stage}>"), "wandb": (config.get("tracking", {}) or {}).get("wandb", "offline")}


def render(config: dict[str, Any], stage: str, resources: dict[str, Any]) -> tuple[Driver, dict[str, Any]]:
    """The config a submit would write, with placeholder input paths."""
    p = _placeholders(stage, resources, config)
    if stage == "rm":
        return translate_rm(config["rm"], model=Path("<input model>"), prefs=Path("<input data>"), **p)
    return translate(config["rl"], policy=Path("<input policy>"), prompts=Path("<input prompts>"),
                     prefs=Path("<input prefs>"), reward_model=Path("<input reward_model>"), **p)


def deadline_problems(stage: str, section: dict, checkpointing: dict, resources: dict) -> list[str]:
    """checkpoint_must_save_by against the job's time. NeMo RL saves and stops once its training time
    plus its mean step time reaches that deadline (nemo_rl/utils/timer.py TimeoutChecker,
    fit_last_save_time), so the save starts up to one step before it; a step longer than the mean and
    the save itself run past it. The job must be done before Slurm's signal (resources.time_min less
    signal_delay_s). With the stage's recorded step time (`step_time_s`, as a run measured it), the
    deadline plus one step must fit; without, the deadline alone."""
    must = checkpointing.get("checkpoint_must_save_by")
    if must is None:
        return []
    parts = str(must).split(":")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return [f"{stage}.checkpointing.checkpoint_must_save_by must be DD:HH:MM:SS (got {must!r})"]
    days, hours, minutes, seconds = map(int, parts)
    deadline = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    step = section.get("step_time_s")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0):
        return [f"{stage}.step_time_s must be a number of seconds > 0, or null (got {step!r})"]
    lead = int(resources.get("signal_delay_s", 0))    # recipe.yaml's; nano3 gives every GPU stage one
    limit = int(resources.get("time_min", 60)) * 60 - lead
    need = deadline + (step or 0)
    if need <= limit:
        return []
    what = f"{must} + one step ({step:g} s)" if step else str(must)
    return [f"{stage}.checkpointing.checkpoint_must_save_by: {what} ends {need - limit} s after the job's signal "
            f"({resources.get('time_min', 60)} min less {lead} s): NeMo RL would still be training when Slurm stops "
            "the job; lower it or raise the stage's time"]


def check_config(config: dict[str, Any], stage: str, resources: dict[str, Any] | None) -> list[str]:
    """For `jobs submit`: every key the image's NeMo RL lacks, a GRPO env mix no driver serves,
    and a policy layout that does not divide the allocation's GPUs."""
    try:
        ver = version()
        drv, cfg = render(config, stage, resources or {})
    except NemoRLError as e:
        return [str(e)]
    except (KeyError, TypeError) as e:
        return [f"{stage}: the config lacks or mistypes {e}"]
    problems = unknown_keys(cfg, drv, ver, stage)
    problems += deadline_problems(stage, config[stage], cfg["checkpointing"], resources or {})
    metric = cfg["checkpointing"].get("metric_name")
    if drv.keys in ("dpo", "rm") and isinstance(metric, str) and metric.startswith("val:") \
            and not metric.startswith(f"val:validation-{VAL_NAME}_"):
        problems.append(f"{stage}.checkpointing.metric_name {metric} names no {drv.keys.upper()} validation metric: "
                        f"they are val:validation-{VAL_NAME}_<metric> (e.g. val:validation-{VAL_NAME}_accuracy)")
    gpus = cfg["cluster"]["num_nodes"] * cfg["cluster"]["gpus_per_node"]
    pol = cfg["policy"]
    for name in ("megatron_cfg", "dtensor_cfg"):
        layout = pol.get(name) or {}
        if not layout.get("enabled") or not gpus:
            continue
        if stage == "rl" and "reward_model" in cfg.get("env", {}):
            res = cfg["env"]["reward_model"].get("resources", {})
            gpus -= int(res.get("num_nodes", 0)) * int(res.get("gpus_per_node", 0))
            if gpus <= 0:
                problems.append(f"{stage}.env.reward_model.resources take every GPU of the allocation: none is left "
                                "for the policy")
                break
        size = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                    "tensor_parallel_size"):
            v = layout.get(key, 1)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                problems.append(f"{stage}.policy.{name}.{key} must be an integer >= 1 (got {v!r})")
                v = 1
            size *= v
        if gpus % size:
            problems.append(f"{stage}.policy.{name}: {gpus} GPUs are not a multiple of the model-parallel size {size}")
            continue
        gbs, mbs = pol.get("train_global_batch_size"), pol.get("train_micro_batch_size", 1)
        if isinstance(gbs, int) and isinstance(mbs, int) and mbs > 0 and gbs % (mbs * (gpus // size)):
            problems.append(f"{stage}.policy.train_global_batch_size {gbs} is not a multiple of train_micro_batch_size "
                            f"* data parallel = {mbs} * {gpus // size} ({gpus} GPUs / model-parallel size {size})")
    vllm_tp = ((pol.get("generation") or {}).get("vllm_cfg") or {}).get("tensor_parallel_size")
    if isinstance(vllm_tp, int) and vllm_tp > 0 and gpus and gpus % vllm_tp:
        problems.append(f"{stage}.policy.generation.vllm_cfg.tensor_parallel_size {vllm_tp} does not divide {gpus} GPUs")
    if not problems:
        problems += construction_problems(drv, cfg, Path(f"<run {stage}>"),
                                          config.get("tracking", {}).get("wandb", "offline"), stage)
    return problems


def merged(drv: Driver, cfg: dict, run_dir: Path, repo: Path = REPO) -> dict:
    """The config NeMo RL's drivers get: ours merged with its `defaults:` parents as its loader does."""
    from stages.backends import nemo_rl_checks

    beside = {Path(f).name: f for f in drv.beside}
    return nemo_rl_checks.load(cfg, str(run_dir / "nemo_rl.yaml"), str(repo), beside)


def construction_problems(drv: Driver, cfg: dict, run_dir: Path, wandb: str, stage: str) -> list[str]:
    """Every refusal NeMo RL's loader, policy, generation, logger, setup and driver would make with this
    config (stages/backends/nemo_rl_checks.py: each with its upstream file and line)."""
    from omegaconf.errors import OmegaConfBaseException

    from stages.backends import nemo_rl_checks

    env = dict(job_env(wandb), **({"WANDB_API_KEY": "set"} if os.environ.get("WANDB_API_KEY") else {}))
    try:
        full = merged(drv, cfg, run_dir)
    except nemo_rl_checks.LoadError as e:
        return [f"{stage}: {e}"]
    except OmegaConfBaseException as e:
        return [f"{stage}: NeMo RL's loader cannot merge the config with {drv.defaults}: {str(e).splitlines()[0]}"]
    return [f"{stage}: {p}" for p in nemo_rl_checks.problems(nemo_rl_checks.Job(full, drv.keys, env))]


def preview(config: dict[str, Any], resources: dict[str, Any], stage: str = "rl") -> str:
    """The rendered NeMo RL config (placeholder paths) and command, and the generation layout."""
    import yaml

    drv, cfg = render(config, stage, resources)
    runs = Path(f"<run {stage}>")
    lines = [f"NeMo RL {version()} ({upstream(version())['source']})",
             f"rank 0 runs: {' '.join(command(drv, runs / 'nemo_rl.yaml', 'python3'))}"]
    gen = cfg["policy"].get("generation") or {}
    if gen:
        vllm = gen.get("vllm_cfg", {})
        lines.append(f"generation: {gen.get('backend')} colocated={gen.get('colocated', {}).get('enabled')} "
                     f"tensor_parallel_size={vllm.get('tensor_parallel_size')} "
                     f"gpu_memory_utilization={vllm.get('gpu_memory_utilization')}")
    lines.append(f"cluster: {cfg['cluster']['num_nodes']} nodes x {cfg['cluster']['gpus_per_node']} GPUs")
    from stages.backends import nemo_rl_checks

    env = job_env((config.get("tracking", {}) or {}).get("wandb", "offline"))
    lines.append(f"driver env: {' '.join(f'{k}={v}' for k, v in env.items()) or '(as the job)'}; merged with "
                 f"{drv.defaults} as NeMo RL's loader does, checked against {len(nemo_rl_checks.CHECKS)} of its "
                 f"construction-time refusals ({nemo_rl_checks.parents()['source']})")
    return "\n".join(lines + [f"{runs / 'nemo_rl.yaml'}:", yaml.safe_dump(cfg, sort_keys=False)])


def rows(drv: Driver, cfg: dict) -> int:
    """Training rows the driver's dataloader gets: prep_rl's / prep_sft's manifest count, else the JSONL's lines."""
    import json

    train = Path(cfg["data"]["train_data_path"])
    manifest = train.parent / "manifest.json"
    if manifest.is_file():
        count = json.loads(manifest.read_text()).get("train")
        if isinstance(count, int):
            return count
    with open(train, "rb") as f:
        return sum(1 for line in f if line.strip())


def final_step(kind: str, full: dict, n_rows: int) -> int:
    """The step at which the driver stops by itself: the first of max_num_steps and max_num_epochs
    epochs, an epoch being len(dataloader) = rows // batch (drop_last). GRPO: grpo.py:1067 with
    len(dataloader) of num_prompts_per_step prompts (grpo.py:261, drop_last=True); DPO: dpo.py:551;
    RM: rm.py:481, both batching train_global_batch_size pairs. A max_num_steps <= 0 means none."""
    section = full[kind]
    batch = full["grpo"]["num_prompts_per_step"] * full["grpo"].get("batch_multiplier", 1) if kind == "grpo" \
        else full["policy"]["train_global_batch_size"]
    per_epoch = n_rows // max(1, int(batch))
    by_epochs = int(section.get("max_num_epochs", 1)) * per_epoch
    steps = section.get("max_num_steps")
    return by_epochs if steps is None or steps <= 0 else min(int(steps), by_epochs)


def best_step(steps: list[Path], checkpointing: dict) -> Path:
    """The step to export: the best by checkpointing.metric_name in its training_info.json (as NeMo RL's
    CheckpointManager.get_best_checkpoint_path ranks them, ties to the later step), else the last."""
    import json

    metric, higher = checkpointing.get("metric_name"), checkpointing.get("higher_is_better", True)
    scored = []
    for step in steps:
        info = step / "training_info.json"
        value = json.loads(info.read_text()).get(metric) if metric and info.is_file() else None
        if isinstance(value, (int, float)):
            scored.append((value if higher else -value, int(step.name[5:]), step))
    return max(scored)[2] if scored else steps[-1]


def as_reward_model(hf_dir: Path) -> None:
    """NeMo RL's DCP -> HF converter writes the config of policy.model_name, the SFT causal LM
    (nemo_rl/utils/native_checkpoint.py: AutoConfig.from_pretrained(model_name).save_pretrained); the
    weights are a Bradley-Terry model's, one score. Make the config say so: the sequence-classification
    class of the same architecture and one label, so AutoModelForSequenceClassification loads the head."""
    import json

    path = Path(hf_dir) / "config.json"
    cfg = json.loads(path.read_text())
    cfg["architectures"] = [a.replace("ForCausalLM", "ForSequenceClassification") for a in cfg.get("architectures") or []]
    cfg["id2label"], cfg["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    cfg.pop("num_labels", None)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def sequence_classifier_problem(model_dir: Path) -> str | None:
    """Why the model in `model_dir` cannot load as a sequence classifier with the transformers this
    process has (in a job: the image's), or None. NeMo RL nano-v3 trains reward models only on its
    DTensor backend, loading `AutoModelForSequenceClassification` with trust_remote_code
    (dtensor_policy_worker.py:236-265); its Megatron backend refuses reward models
    (megatron_policy_worker.py:567-572). A class comes from the checkpoint's remote code (its config's
    auto_map) or from transformers' own sequence-classification mapping. NemotronH has neither: the
    image's transformers 4.57.1 has no nemotron_h model at all, and Nemotron-3-Nano's auto_map names
    only AutoConfig, AutoModel and AutoModelForCausalLM."""
    import json

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    auto_map = cfg.get("auto_map") or {}
    if "AutoModelForSequenceClassification" in auto_map:
        return None
    if not auto_map and cfg.get("model_type") in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        return None
    return (f"{cfg.get('model_type')!r} has no sequence-classification class in transformers "
            f"{transformers.__version__} nor in the checkpoint's code (auto_map: {', '.join(auto_map) or 'none'}), "
            "and NeMo RL trains reward models only through that class: no Bradley-Terry reward model can be "
            "trained from this model here")


def run_stage(ctx, stage: str = "rl") -> dict[str, Path]:
    """rl: GRPO/DPO -> the policy (`model`); rm: Bradley-Terry training -> `reward_model`."""
    import yaml

    try:
        import nemo_rl  # noqa: F401  (only: is it installed?)
    except ImportError:
        raise StageError(f"{stage} with backend nemo_rl runs in the pinned nemo-rl container "
                           "(nemo_rl is not installed here)") from None
    if not ctx.dist.is_main:
        return {}  # the other nodes only host Ray workers
    gpus = ctx.resources.gpus_per_node or 8
    repo = checkout()
    where = dict(nodes=max(1, len(ctx.dist.nodes)), gpus_per_node=gpus, run_dir=ctx.run_dir,
                 wandb=ctx.config.get("tracking", {}).get("wandb", "offline"), repo=repo)
    if stage == "rm":
        problem = sequence_classifier_problem(ctx.input("model"))
        if problem:      # before Ray, vLLM or any GPU work: NeMo RL would fail at its first model load
            raise StageError(f"rm: {problem}")
        section = ctx.config["rm"]
        drv, cfg = translate_rm(section, model=ctx.input("model"), prefs=ctx.input("data"), **where)
        output, megatron = "reward_model", False
    else:
        section = ctx.config["rl"]
        drv, cfg = translate(section, policy=ctx.input("policy"), prompts=ctx.inputs.get("prompts"),   # stages/rl.py
                             prefs=ctx.inputs.get("prefs"), reward_model=ctx.inputs.get("reward_model"), **where)  # unused_inputs
        output = "model"
        megatron = bool((cfg["policy"].get("megatron_cfg") or {}).get("enabled"))
    full = merged(drv, cfg, ctx.run_dir, repo)
    target = final_step(drv.keys, full, rows(drv, cfg))
    path = ctx.run_dir / "nemo_rl.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for f in drv.beside:       # a parent's relative `defaults:` is looked up beside our config
        (ctx.run_dir / Path(f).name).write_bytes((repo / f).read_bytes())
    # NeMo RL saves by itself before checkpointing.checkpoint_must_save_by and exits; the requeued
    # job resumes from the same checkpoint_dir.
    upstream_run.run(command(drv, path, repo=repo), cwd=repo, env={**os.environ, **job_env(where["wandb"])})
    steps = sorted(Path(cfg["checkpointing"]["checkpoint_dir"]).glob("step_*"), key=lambda p: int(p.name[5:]))
    if not steps:
        raise StageError(f"NeMo RL wrote no checkpoint under {cfg['checkpointing']['checkpoint_dir']}")
    if int(steps[-1].name[5:]) < target:
        ctx.requeue()  # stopped at its own deadline before its own end: resume in the next attempt
    out = ctx.output_dir(output)
    export(best_step(steps, full["checkpointing"]), out, megatron=megatron, repo=repo)
    if stage == "rm":
        as_reward_model(out)
    return {output: out}
