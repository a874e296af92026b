"""Our stage config -> Megatron-Bridge's configuration, as plain typed data (no Megatron import).

Megatron-Bridge is configured by a `ConfigContainer` (megatron.bridge.training.config) whose
sections are typed dataclasses: `model` (the model provider: parallel layout, sequence length),
`train` (TrainingConfig), `validation` (ValidationConfig), `optimizer` (OptimizerConfig),
`scheduler` (SchedulerConfig), `checkpoint` (CheckpointConfig), `logger` (LoggerConfig),
`dataset` (GPTDatasetConfig for pretraining, FinetuningDatasetConfig for SFT), `tokenizer`
(TokenizerConfig) and `rng` (RNGConfig). nano3's stage YAMLs use those sections and Bridge's own
field names; `translate` checks them (unknown keys, GPU layout, batch divisibility — every problem
in one message) and returns a `BridgeJob`: the Bridge recipe to start from, the HF checkpoint to
import, and `overrides()`, a nested dict keyed exactly like ConfigContainer, which the rendered
script applies with Bridge's `process_config_with_overrides`. Field names were read from
Megatron-Bridge v0.5.1 (and still hold in v0.6.0); see README.md in this folder.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


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
class ValidationSection:  # megatron.training.config.ValidationConfig (ConfigContainer.validation)
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
class DatasetSection:    # GPTDatasetConfig (pretrain) or FinetuningDatasetConfig (sft)
    seq_length: int
    data_path: list | None = None          # GPTDatasetConfig.data_path: [weight, prefix, weight, prefix, ...]
    dataset_root: str | None = None        # FinetuningDatasetConfig.dataset_root
    packed_sequence_size: int | None = None  # -> FinetuningDatasetConfig.packed_sequence_specs.packed_sequence_size


@dataclass(frozen=True)
class TokenizerSection:  # megatron.bridge.training.tokenizers.config.TokenizerConfig
    tokenizer_model: str
    tokenizer_type: str = "HuggingFaceTokenizer"


#: Which Bridge recipe each stage starts from (Nemotron-3-Nano's own, tuned kernels and MoE settings).
RECIPES = {
    "pretrain": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_pretrain_config",
    "sft": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_sft_config",
}
ENTRIES = {"pretrain": "megatron.bridge.training.pretrain:pretrain",
           "sft": "megatron.bridge.training.finetune:finetune"}


@dataclass(frozen=True)
class BridgeJob:
    """One Megatron-Bridge run, in Bridge's own names: what the rendered scripts execute."""

    stage: str
    recipe: str                  # "module:function" returning a ConfigContainer
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
    dataset: DatasetSection
    tokenizer: TokenizerSection
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

        dataset = {"seq_length": self.dataset.seq_length}
        if self.stage == "pretrain":
            dataset["data_path"] = self.dataset.data_path
        else:
            dataset["dataset_root"] = self.dataset.dataset_root
        result = {
            "model": clean(asdict(self.model)),
            "train": clean(asdict(self.train)),
            "validation": clean(asdict(self.validation)),
            "optimizer": clean(asdict(self.optimizer)),
            "scheduler": clean(asdict(self.scheduler)),
            "checkpoint": clean(asdict(self.checkpoint)),
            "logger": clean(asdict(self.logger)),
            "dataset": clean(dataset),
            "tokenizer": asdict(self.tokenizer),
            "rng": {"seed": self.seed},
        }
        if self.stage == "sft":  # None turns the recipe's default packing off
            size = self.dataset.packed_sequence_size
            result["dataset"]["packed_sequence_specs"] = {"packed_sequence_size": size} if size else None
        return result

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TranslationError(ValueError):
    """The stage config cannot become a Megatron-Bridge run; the message lists every problem."""


def _section(cls, values: dict, where: str, problems: list[str], **given) -> Any:
    """`cls(**values, **given)`, with unknown and missing keys reported instead of raised."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        problems.append(f"{where}: unknown key(s) {', '.join(unknown)} (valid: {', '.join(sorted(names - set(given)))})")
    kwargs = {k: v for k, v in values.items() if k in names}
    try:
        return cls(**kwargs, **given)
    except TypeError as e:  # a required field is missing
        problems.append(f"{where}: {e}")
        return None


def translate(config: dict, stage: str, *, hf_model: str, data: dict[str, Any], checkpoint_dir: str,
              export_dir: str, log_dir: str, run_name: str, gpus: int, hf_revision: str | None = None) -> BridgeJob:
    """ctx.config of a nano3 `pretrain` or `sft` stage -> BridgeJob. Raises TranslationError.

    `hf_model`: the HF checkpoint to start from (a folder or a hub id). `data`: for pretrain
    {"data_path": [w, prefix, ...], "tokenizer": folder}, for sft {"dataset_root": folder}.
    `checkpoint_dir`: the run's checkpoint folder (same on every requeue: Bridge resumes from it).
    """
    if stage not in RECIPES:
        raise TranslationError(f"the megatron backend runs pretrain and sft, not {stage!r}")
    s = dict(config[stage])
    problems: list[str] = []
    known = {"backend", "model", "train", "optimizer", "scheduler", "checkpoint", "logger", "dataset"}
    for key in sorted(set(s) - known):
        problems.append(f"{stage}.{key}: unknown section (valid: {', '.join(sorted(known))})")

    model_cfg = dict(s.get("model", {}))
    dataset_cfg = dict(s.get("dataset", {}))
    seq_length = dataset_cfg.pop("seq_length", None) or model_cfg.get("seq_length")
    if seq_length is None:
        problems.append(f"{stage}: no sequence length (model.seq_length or dataset.seq_length)")
    elif model_cfg.get("seq_length", seq_length) != seq_length:
        problems.append(f"{stage}: model.seq_length {model_cfg['seq_length']} != dataset.seq_length {seq_length}")
    model_cfg["seq_length"] = seq_length
    model = _section(ModelSection, model_cfg, f"{stage}.model", problems)

    train_cfg = dict(s.get("train", {}))
    validation = _section(ValidationSection, {k: train_cfg.pop(k) for k in ("eval_interval", "eval_iters") if k in train_cfg},
                          f"{stage}.train", problems)
    train = _section(TrainSection, train_cfg, f"{stage}.train", problems)
    optimizer = _section(OptimizerSection, dict(s.get("optimizer", {})), f"{stage}.optimizer", problems)
    scheduler = _section(SchedulerSection, dict(s.get("scheduler", {})), f"{stage}.scheduler", problems)
    checkpoint = _section(CheckpointSection, dict(s.get("checkpoint", {})), f"{stage}.checkpoint", problems,
                          save=f"{checkpoint_dir}/megatron", load=f"{checkpoint_dir}/megatron",
                          pretrained_checkpoint=f"{checkpoint_dir}/imported")
    tracking = config.get("tracking", {}) or {}
    wandb_on = tracking.get("wandb", "offline") != "disabled"
    logger = _section(LoggerSection, dict(s.get("logger", {})), f"{stage}.logger", problems,
                      tensorboard_dir=f"{log_dir}/tensorboard" if tracking.get("tensorboard", True) else None,
                      wandb_project=tracking.get("project") if wandb_on else None,
                      wandb_exp_name=run_name if wandb_on else None,
                      wandb_save_dir=log_dir if wandb_on else None)

    packed = bool(dataset_cfg.pop("packed_sequence", False))
    for key in sorted(dataset_cfg):
        problems.append(f"{stage}.dataset: unknown key {key} (valid: packed_sequence, seq_length)")
    if stage == "pretrain":
        dataset = DatasetSection(seq_length=seq_length or 0, data_path=list(data.get("data_path") or []))
        if not dataset.data_path:
            problems.append("pretrain: the corpus has no Megatron indexed shards (*.bin/*.idx)")
        tokenizer = TokenizerSection(tokenizer_model=str(data.get("tokenizer") or hf_model))
    else:
        dataset = DatasetSection(seq_length=seq_length or 0, dataset_root=str(data["dataset_root"]),
                                 packed_sequence_size=seq_length if packed else None)
        tokenizer = TokenizerSection(tokenizer_model=hf_model)   # a model artifact carries its tokenizer

    if model and train:
        problems += _layout_problems(stage, model, train, gpus)
    if optimizer and optimizer.min_lr is not None and optimizer.min_lr > optimizer.lr:
        problems.append(f"{stage}.optimizer: min_lr {optimizer.min_lr} > lr {optimizer.lr}")
    if scheduler and train and scheduler.lr_warmup_iters >= train.train_iters:
        problems.append(f"{stage}.scheduler: lr_warmup_iters {scheduler.lr_warmup_iters} >= train_iters {train.train_iters}")
    if problems:
        raise TranslationError(f"{stage} (megatron backend): " + "; ".join(problems))

    base = config.get("base_model", {}) or {}
    return BridgeJob(
        stage=stage, recipe=RECIPES[stage], entry=ENTRIES[stage], hf_model=hf_model, hf_revision=hf_revision,
        trust_remote_code=bool(base.get("trust_remote_code", False)), seed=int(config.get("seed", 1234)),
        model=model, train=train, validation=validation, optimizer=optimizer, scheduler=scheduler,
        checkpoint=checkpoint, logger=logger, dataset=dataset, tokenizer=tokenizer, hf_export=export_dir,
        gpus=gpus,
    )


def _layout_problems(stage: str, m: ModelSection, t: TrainSection, gpus: int) -> list[str]:
    """Megatron's own start-up checks, done before the job waits in a GPU queue."""
    problems = []
    tp, pp, cp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size
    ep, etp = m.expert_model_parallel_size, m.expert_tensor_parallel_size
    if gpus % (tp * pp * cp):
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
