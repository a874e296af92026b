"""Our stage config -> Megatron-Bridge's configuration, as plain typed data (no Megatron import).

Megatron-Bridge is configured by a `ConfigContainer` (megatron.bridge.training.config) whose
sections are typed dataclasses: `model` (the model provider: parallel layout, sequence length),
`train` (TrainingConfig), `optimizer`, `scheduler`, `checkpoint`, `logger`, `dataset`
(GPTDatasetConfig for pretraining, FinetuningDatasetConfig for SFT), `tokenizer` and `rng`.
nano3's stage YAMLs use those sections and Bridge's own field names. `translate` checks them —
every key against the fields the *target Bridge version* has (upstream_fields.yaml, read from
its source by dev/upstream_fields.py), the GPU layout, batch divisibility — and reports every
problem in one message, because Bridge itself only logs "Key ... not found ... Skipping" for an
unknown override and trains on. It returns a `BridgeJob`: the version's recipe, the HF checkpoint
to import, and `overrides()`, a nested dict keyed exactly like that version's ConfigContainer.
Which version: the `megatron_bridge` the `nemo` image carries, in containers/containers.lock.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from stages.contract import StageError
from stages.ml.loop import Schedule, warmup_note

UPSTREAM = Path(__file__).with_name("upstream_fields.yaml")
FINETUNING_DATASET = "megatron.bridge.training.config.FinetuningDatasetConfig"
PACKED_SPECS = "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs"
ENTRIES = {"pretrain": "megatron.bridge.training.pretrain:pretrain",
           "sft": "megatron.bridge.training.finetune:finetune"}


@lru_cache(maxsize=1)
def upstream() -> dict:
    """upstream_fields.yaml: per Bridge / NeMo RL version, the fields it accepts and where they were read."""
    import yaml

    return yaml.safe_load(UPSTREAM.read_text())


def bridge(version: str) -> dict:
    versions = upstream()["megatron_bridge"]
    if version not in versions:
        raise TranslationError(f"Megatron-Bridge {version!r} has no field list in {UPSTREAM.name} "
                               f"(known: {', '.join(versions)}; add it with dev/upstream_fields.py)")
    return versions[version]


def _image_megatron_core() -> str | None:
    from containers import load_lock

    image = load_lock().get("nemo")
    return str(image.libraries.get("megatron_core")) if image and image.libraries.get("megatron_core") else None


def image_version(container: str = "nemo", library: str = "megatron_bridge") -> str:
    """The library version the pinned image carries (containers.lock `libraries:`)."""
    from containers import load_lock

    image = load_lock().get(container)
    version = image.libraries.get(library) if image else None
    if not version:
        raise TranslationError(f"containers.lock: image {container!r} does not say which {library} it carries "
                               f"(libraries: {{{library}: VERSION}})")
    return str(version)


def unknown_keys(overrides: dict, version: str, stage: str) -> list[str]:
    """Every override key (as section.field) the target Bridge version lacks; Bridge would skip it."""
    b = bridge(version)
    sections = b["sections"]

    def walk(d: dict, section: str, where: str) -> list[str]:
        valid = sections.get(section, [])
        out = []
        for key, value in d.items():
            if key == "_target_":
                continue
            if key not in valid:
                near = difflib.get_close_matches(key, valid, n=3)
                out.append(f"{where}.{key}: Megatron-Bridge {version} has no such field"
                           + (f" (did you mean {', '.join(near)}?)" if near else ""))
            elif key == "packed_sequence_specs" and isinstance(value, dict):
                out += walk(value, "packed_sequence_specs", f"{where}.{key}")
        return out

    problems = []
    for section, values in overrides.items():
        if section not in sections["config_container"]:
            problems.append(f"{stage}.{section}: Megatron-Bridge {version}'s ConfigContainer has no such section")
            continue
        key = f"dataset/{stage}" if section == "dataset" else section
        problems += walk(values, key, f"{stage}.{section}")
    return problems


@dataclass(frozen=True)
class ModelSection:      # fields of the model provider (megatron.core TransformerConfig / ModelParallelConfig)
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    sequence_parallel: bool = False
    seq_length: int | None = None
    calculate_per_token_loss: bool | None = None


@dataclass(frozen=True)
class TrainSection:      # megatron.bridge.training.config.TrainingConfig
    train_iters: int
    global_batch_size: int
    micro_batch_size: int = 1
    exit_signal_handler: bool = True


@dataclass(frozen=True)
class ValidationSection:  # ConfigContainer.validation (Bridge >= 0.4), else TrainingConfig's own fields
    eval_interval: int | None = None
    eval_iters: int | None = None


@dataclass(frozen=True)
class OptimizerSection:  # megatron.bridge.training.config.OptimizerConfig (megatron.core.optimizer)
    lr: float
    min_lr: float | None = None
    optimizer: str = "adam"
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    clip_grad: float = 1.0
    bf16: bool = True


@dataclass(frozen=True)
class SchedulerSection:  # megatron.bridge.training.config.SchedulerConfig
    lr_decay_style: str = "cosine"
    lr_warmup_iters: int = 0
    lr_decay_iters: int | None = None


@dataclass(frozen=True)
class CheckpointSection:  # megatron.bridge.training.config.CheckpointConfig
    save: str
    load: str
    pretrained_checkpoint: str | None
    save_interval: int
    most_recent_k: int = -1
    ckpt_format: str = "torch_dist"
    async_save: bool = False


@dataclass(frozen=True)
class LoggerSection:     # megatron.bridge.training.config.LoggerConfig
    log_interval: int = 10
    tensorboard_dir: str | None = None
    wandb_project: str | None = None
    wandb_exp_name: str | None = None
    wandb_save_dir: str | None = None


@dataclass(frozen=True)
class TokenizerSection:  # megatron.bridge.training.tokenizers.config.TokenizerConfig
    tokenizer_model: str
    tokenizer_type: str = "HuggingFaceTokenizer"


@dataclass(frozen=True)
class BridgeJob:
    """One Megatron-Bridge run, in the target version's own names: what the rendered scripts execute."""

    stage: str
    version: str                 # Megatron-Bridge version the overrides and scripts are rendered for
    recipe: str                  # "module:function" returning a ConfigContainer (the stage's `recipe:`, else Nano-3's)
    recipe_kwargs: dict          # its arguments: {"peft": None} = full SFT in nano-v3's finetune recipe;
                                 # {"hf_model": ...} for a stage's own recipe
    entry: str                   # "module:function": pretrain() or finetune()
    hf_model: str                # what AutoBridge.import_ckpt / from_hf_pretrained read
    hf_revision: str | None      # a hub commit for a hub id; None for a folder
    trust_remote_code: bool
    seed: int
    model: ModelSection
    train: TrainSection
    validation: ValidationSection
    optimizer: OptimizerSection
    scheduler: SchedulerSection
    checkpoint: CheckpointSection
    logger: LoggerSection
    dataset: dict                # the dataset section as rendered (a whole FinetuningDatasetConfig for sft)
    tokenizer: TokenizerSection
    extra: dict                  # {section: {field: value}}: further fields of the version, passed through
    hf_export: str               # where AutoBridge.export_ckpt writes the HF folder (the stage's output)
    gpus: int

    @property
    def data_parallel_size(self) -> int:
        m = self.model
        return self.gpus // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size)

    def overrides(self) -> dict[str, Any]:
        """ConfigContainer overrides: {section: {field: value}}; None values are left to the recipe."""
        def clean(d: dict) -> dict:
            return {k: v for k, v in d.items() if v is not None}

        result = {
            "model": clean(asdict(self.model)),
            "train": clean(asdict(self.train)),
            "optimizer": clean(asdict(self.optimizer)),
            "scheduler": clean(asdict(self.scheduler)),
            "checkpoint": clean(asdict(self.checkpoint)),
            "logger": clean(asdict(self.logger)),
            "dataset": dict(self.dataset),
            "tokenizer": asdict(self.tokenizer),
            "rng": {"seed": self.seed},
        }
        validation = clean(asdict(self.validation))
        if "validation" in bridge(self.version)["sections"]["config_container"]:
            result["validation"] = validation
        else:                       # Bridge < 0.4: TrainingConfig.eval_interval / eval_iters
            result["train"].update(validation)
        for section, values in self.extra.items():
            result.setdefault(section, {}).update(values)
        return result


@dataclass(frozen=True)
class _NoFields:          # for a section whose keys all pass through (dataset extras)
    pass


class TranslationError(StageError):
    """The stage config cannot become a Megatron-Bridge run; the message lists every problem."""


def _section(cls, values: dict, where: str, problems: list[str], valid: list[str], extra: dict,
             **given) -> Any:
    """`cls(**values, **given)`; keys outside `cls` that the Bridge version has go to `extra`,
    the rest are reported (with the nearest valid names) instead of raised."""
    names = {f.name for f in fields(cls)}
    for key in sorted(set(values) - names):
        if key in valid and key not in given:
            extra[key] = values[key]
        else:
            near = difflib.get_close_matches(key, sorted(set(valid) | names), n=3)
            problems.append(f"{where}.{key}: unknown key" + (f" (did you mean {', '.join(near)}?)" if near else ""))
    kwargs = {k: v for k, v in values.items() if k in names}
    for f in fields(cls):
        if f.name in kwargs and not _typed_ok(str(f.type), kwargs[f.name]):
            problems.append(f"{where}.{f.name} must be {f.type} (got {kwargs[f.name]!r})")
            return None
    try:
        return cls(**kwargs, **given)
    except TypeError as e:  # a required field is missing, or one the run sets was given
        problems.append(f"{where}: {e}")
        return None


def _typed_ok(kind: str, value) -> bool:
    """`value` fits a section field's annotation (int, float, bool, str, each maybe `| None`)."""
    if value is None:
        return "None" in kind
    if isinstance(value, bool):
        return "bool" in kind
    if isinstance(value, int):
        return "int" in kind or "float" in kind
    if isinstance(value, float):
        return "float" in kind
    return isinstance(value, str) and "str" in kind


def translate(config: dict, stage: str, *, hf_model: str, data: dict[str, Any], checkpoint_dir: str,
              export_dir: str, log_dir: str, run_name: str, gpus: int, hf_revision: str | None = None,
              version: str | None = None) -> BridgeJob:
    """ctx.config of a nano3 `pretrain` or `sft` stage -> BridgeJob. Raises TranslationError.

    `hf_model`: the HF checkpoint to start from (a folder or a hub id). `data`: for pretrain
    {"train": [(prefix, weight), ...], "valid": [...], "tokenizer": folder}, for sft
    {"dataset_root": folder, "bridge": prep_sft's bridge.json (dataset_kwargs, packed_sequence_specs)}.
    `checkpoint_dir`: the run's checkpoint folder (same on every requeue: Bridge resumes from it).
    `version`: the Megatron-Bridge to render for; default: the one the `nemo` image carries.
    """
    if stage not in ENTRIES:
        raise TranslationError(f"the megatron backend runs pretrain and sft, not {stage!r}")
    version = version or image_version()
    b = bridge(version)
    valid = b["sections"]
    if stage not in b["recipes"]:
        raise TranslationError(f"Megatron-Bridge {version} has no Nemotron-3-Nano {stage} recipe")
    if not isinstance(config.get(stage), dict):
        raise TranslationError(f"the config has no {stage}: section")
    s = dict(config[stage])
    problems: list[str] = []
    known = {"backend", "peft", "recipe", "model", "train", "optimizer", "scheduler", "checkpoint", "logger", "dataset"}
    for key in sorted(set(s) - known):
        problems.append(f"{stage}.{key}: unknown section (valid: {', '.join(sorted(known))})")
    shape = [f"{stage}.{key} must be a mapping (got {s[key]!r})" for key in sorted(known - {"backend", "peft", "recipe"})
             if not isinstance(s.get(key, {}), dict)]
    if shape:
        raise TranslationError(f"{stage} (megatron backend): " + "; ".join(problems + shape))
    extra: dict[str, dict] = {}

    def section(cls, name: str, values: dict, valid_name: str | None = None, **given):
        return _section(cls, values, f"{stage}.{name}", problems, valid.get(valid_name or name, []),
                        extra.setdefault(name, {}), **given)

    model_cfg = dict(s.get("model", {}))
    dataset_cfg = dict(s.get("dataset", {}))
    seq_length = dataset_cfg.pop("seq_length", None) or model_cfg.get("seq_length")
    if seq_length is None:
        problems.append(f"{stage}: no sequence length (model.seq_length or dataset.seq_length)")
    elif model_cfg.get("seq_length", seq_length) != seq_length:
        problems.append(f"{stage}: model.seq_length {model_cfg['seq_length']} != dataset.seq_length {seq_length}")
    model_cfg["seq_length"] = seq_length
    model = section(ModelSection, "model", model_cfg)

    train_cfg = dict(s.get("train", {}))
    validation = ValidationSection(**{k: train_cfg.pop(k) for k in ("eval_interval", "eval_iters") if k in train_cfg})
    train = section(TrainSection, "train", train_cfg)
    optimizer = section(OptimizerSection, "optimizer", dict(s.get("optimizer", {})))
    scheduler = section(SchedulerSection, "scheduler", dict(s.get("scheduler", {})))
    checkpoint = section(CheckpointSection, "checkpoint", dict(s.get("checkpoint", {})),
                         save=f"{checkpoint_dir}/megatron", load=f"{checkpoint_dir}/megatron",
                         pretrained_checkpoint=f"{checkpoint_dir}/imported")
    tracking = config.get("tracking", {}) or {}
    wandb_on = tracking.get("wandb", "offline") != "disabled"
    logger = section(LoggerSection, "logger", dict(s.get("logger", {})),
                     tensorboard_dir=f"{log_dir}/tensorboard" if tracking.get("tensorboard", True) else None,
                     wandb_project=tracking.get("project") if wandb_on else None,
                     wandb_exp_name=run_name if wandb_on else None,
                     wandb_save_dir=log_dir if wandb_on else None)

    packed = dataset_cfg.pop("packed_sequence", False)
    if not isinstance(packed, bool):
        problems.append(f"{stage}.dataset.packed_sequence must be true or false (got {packed!r})")
    dataset_extra: dict = {}
    _section(_NoFields, dataset_cfg, f"{stage}.dataset", problems, valid.get(f"dataset/{stage}", []), dataset_extra)
    if stage == "pretrain":
        dataset = _pretrain_dataset(data, seq_length, problems)
        tokenizer = TokenizerSection(tokenizer_model=str(data.get("tokenizer") or hf_model))
    else:
        dataset = _sft_dataset(data, seq_length, bool(packed), int(config.get("seed", 1234)), problems)
        tokenizer = TokenizerSection(tokenizer_model=hf_model)   # a model artifact carries its tokenizer
    dataset.update(dataset_extra)

    recipe_kwargs: dict = {}
    recipe = s.get("recipe")
    if recipe is not None and not (isinstance(recipe, str) and re.fullmatch(r"[\w.]+:\w+", recipe)):
        problems.append(f"{stage}.recipe must be module:function (got {recipe!r})")
    peft = s.get("peft")
    if peft is not None and stage == "pretrain":
        problems.append("pretrain.peft: pretraining trains every weight (peft applies to sft)")
    elif peft is not None:
        problems.append(f"sft.peft {peft!r}: only full SFT (peft: null) is supported: a LoRA run saves adapters only, "
                        "and the stage's export (AutoBridge.export_ckpt) needs the full weights")
    elif recipe is not None:
        recipe_kwargs = {"hf_model": hf_model}   # another model's recipe builds its provider from the HF config
    elif stage == "sft" and b["recipes"][stage].endswith("_finetune_config"):
        recipe_kwargs = {"peft": None}    # nano-v3's finetune recipe defaults to LoRA (nemotron_3_nano.py:356)
    if model and train:
        problems += _layout_problems(stage, model, train, gpus)
    if optimizer and optimizer.min_lr is not None and optimizer.min_lr > optimizer.lr:
        problems.append(f"{stage}.optimizer: min_lr {optimizer.min_lr} > lr {optimizer.lr}")
    if scheduler and train and scheduler.lr_warmup_iters >= train.train_iters:   # a short run: warmup_notes says so
        scheduler = replace(scheduler, lr_warmup_iters=Schedule.warmup_for(train.train_iters, scheduler.lr_warmup_iters))
    if problems:
        raise TranslationError(f"{stage} (megatron backend, Bridge {version}): " + "; ".join(problems))

    base = config.get("base_model", {}) or {}
    job = BridgeJob(
        stage=stage, version=version, recipe=recipe or b["recipes"][stage], recipe_kwargs=recipe_kwargs, entry=ENTRIES[stage],
        hf_model=hf_model,
        hf_revision=hf_revision, trust_remote_code=bool(base.get("trust_remote_code", False)),
        seed=int(config.get("seed", 1234)), model=model, train=train, validation=validation, optimizer=optimizer,
        scheduler=scheduler, checkpoint=checkpoint, logger=logger, dataset=dataset, tokenizer=tokenizer,
        extra={k: v for k, v in extra.items() if v}, hf_export=export_dir, gpus=gpus,
    )
    missing = unknown_keys(job.overrides(), version, stage)   # what Bridge would skip without a word
    if missing:
        raise TranslationError(f"{stage} (megatron backend, Bridge {version}): " + "; ".join(missing))
    return job


def warmup_notes(section: dict, stage: str) -> list[str]:
    """What submit says when translate shortens a warmup that is not below train_iters (as the torch
    loop does: a tenth of the iterations), so a short run of a recipe trains instead of being refused."""
    train, scheduler = section.get("train"), section.get("scheduler")
    if not isinstance(train, dict) or not isinstance(scheduler, dict):
        return []
    return warmup_note(train.get("train_iters"), scheduler.get("lr_warmup_iters", 0), f"{stage}.train.train_iters",
                       f"{stage}.scheduler.lr_warmup_iters")


def _pretrain_dataset(data: dict, seq_length, problems: list[str]) -> dict:
    """GPTDatasetConfig fields: the blend where Bridge <= 0.3 reads it (megatron-core's `blend`, or
    `blend_per_split` with a validation blend); never None, which would make Bridge use mock data."""
    def blend(pairs):
        return [[str(p) for p, _ in pairs], [float(w) for _, w in pairs]]

    train, valid = list(data.get("train") or []), list(data.get("valid") or [])
    if not train:
        problems.append("pretrain: the corpus has no Megatron indexed shards (*.bin/*.idx)")
    out: dict = {"sequence_length": seq_length, "mock": False}
    if valid:
        out.update(blend=None, split=None, blend_per_split=[blend(train), blend(valid), None])
    else:
        out.update(blend=blend(train))
    return out


def _sft_dataset(data: dict, seq_length, packed: bool, seed: int, problems: list[str]) -> dict:
    """The whole dataset section, replaced: Bridge's Nano-3 SFT recipe sets HFDatasetConfig(squad),
    and overriding only dataset_root would keep SQuAD."""
    root = str(data["dataset_root"])
    spec = data.get("bridge") or {}
    out = {"_target_": FINETUNING_DATASET, "dataset_root": root, "seq_length": seq_length, "seed": seed,
           "do_test": False, "dataset_kwargs": spec.get("dataset_kwargs"), "packed_sequence_specs": None}
    if packed:
        given = dict(spec.get("packed_sequence_specs") or {})
        size = given.pop("packed_sequence_size", seq_length)
        if size != seq_length:
            problems.append(f"sft.dataset.seq_length {seq_length} != the data's packed_sequence_size {size} "
                            "(prep_sft.pack_size)")
        paths = {k: f"{root}/{v}" for k, v in given.items() if k.endswith("_path")}
        out["packed_sequence_specs"] = {"_target_": PACKED_SPECS, "packed_sequence_size": seq_length, **paths}
    return out


#: Nemotron-3-Nano's attention: Nemotron3NanoProvider at Bridge nano-v3
#: (src/megatron/bridge/models/nemotronh/nemotron_h_provider.py:152,160).
NUM_QUERY_GROUPS, NUM_ATTENTION_HEADS = 2, 32


#: Unreleased megatron-core commits whose TransformerConfig accepts TP a multiple of num_query_groups:
#: Megatron-LM f7dfb9979 (2025-12-07) and NeMo RL 823fcc904's fork 29e426c01 (yifu/nano-v3-main).
ACCEPTS_TP_MULTIPLE = ("f7dfb9979", "29e426c01")


def query_groups_rule(megatron_core: str | None) -> str:
    """How the image's megatron-core checks num_query_groups against TP (TransformerConfig.__post_init__):
    "multiple or divisor" from Megatron-LM f7dfb9979 (2025-12-07, core 0.16.0), "multiple" before.
    containers.lock's `megatron_core` for the nemo image says which (`OWNER/Megatron-LM@COMMIT`, or a release)."""
    v = str(megatron_core or "")
    if any(commit in v for commit in ACCEPTS_TP_MULTIPLE):
        return "multiple or divisor"
    parts = v.split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and (int(parts[0]), int(parts[1])) >= (0, 16):
        return "multiple or divisor"
    return "multiple"


def _layout_problems(stage: str, m: ModelSection, t: TrainSection, gpus: int) -> list[str]:
    """Megatron's own start-up checks, done before the job waits in a GPU queue."""
    problems = []
    tp, pp, cp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size
    ep, etp = m.expert_model_parallel_size, m.expert_tensor_parallel_size
    rule = query_groups_rule(_image_megatron_core())
    groups = NUM_QUERY_GROUPS
    if NUM_ATTENTION_HEADS % tp:
        problems.append(f"model.tensor_model_parallel_size {tp} does not divide num_attention_heads {NUM_ATTENTION_HEADS}")
    elif groups % tp and not (rule == "multiple or divisor" and tp % groups == 0):
        problems.append(f"model.tensor_model_parallel_size {tp}: megatron-core ({_image_megatron_core()}) needs "
                        f"num_query_groups ({groups}) to be a {rule} of it")
    if gpus < 1:
        problems.append("the megatron backend trains on GPUs: give the stage resources.gpus_per_node")
    elif gpus % (tp * pp * cp):
        problems.append(f"{gpus} GPUs are not a multiple of tensor*pipeline*context = {tp * pp * cp}")
    elif gpus % (etp * ep * pp):
        problems.append(f"{gpus} GPUs are not a multiple of expert_tensor*expert*pipeline = {etp * ep * pp}")
    else:
        dp = gpus // (tp * pp * cp)
        if t.global_batch_size % (t.micro_batch_size * dp):
            problems.append(f"train.global_batch_size {t.global_batch_size} is not a multiple of "
                            f"micro_batch_size*data_parallel = {t.micro_batch_size}*{dp}")
    if m.sequence_parallel and tp == 1:
        problems.append("model.sequence_parallel needs tensor_model_parallel_size > 1")
    if m.seq_length and cp > 1 and m.seq_length % (2 * cp):
        problems.append(f"model.seq_length {m.seq_length} must be a multiple of 2*context_parallel_size")
    return [f"{stage}: {p}" for p in problems]
