"""Our stage config -> Megatron-Bridge's configuration, as plain typed data.

Megatron-Bridge is configured by a `ConfigContainer` of typed sub-configs (training, optimizer,
scheduler, checkpoint, ...) plus a model provider that `AutoBridge.from_hf_pretrained(...)
.to_megatron_provider()` builds from the HF checkpoint. This module produces exactly those fields
as dataclasses, so the translation is unit-tested on a CPU; `launch.py` renders the script that
turns them into the real objects inside the GPU container.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Parallelism:
    """Fields set on the model provider before `finalize()`."""

    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    context_parallel_size: int
    expert_model_parallel_size: int
    sequence_parallel: bool


@dataclass(frozen=True)
class Training:          # megatron.bridge.training.config.TrainingConfig
    train_iters: int
    global_batch_size: int
    micro_batch_size: int


@dataclass(frozen=True)
class Optimizer:         # megatron.core.optimizer.OptimizerConfig
    optimizer: str
    lr: float
    min_lr: float
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    clip_grad: float
    bf16: bool
    use_distributed_optimizer: bool = True


@dataclass(frozen=True)
class Scheduler:         # megatron.bridge.training.config.SchedulerConfig
    lr_decay_style: str
    lr_warmup_iters: int


@dataclass(frozen=True)
class Checkpoint:        # megatron.bridge.training.config.CheckpointConfig
    save: str
    load: str
    save_interval: int
    ckpt_format: str


@dataclass(frozen=True)
class BridgeJob:
    """Everything one Megatron-Bridge run needs, in Megatron-Bridge's own field names."""

    mode: str                     # "pretrain" | "finetune"
    hf_model: str                 # what AutoBridge.from_hf_pretrained reads
    seq_length: int
    parallel: Parallelism
    training: Training
    optimizer: Optimizer
    scheduler: Scheduler
    checkpoint: Checkpoint
    data_path: str
    hf_export: str                # where bridge.save_hf_pretrained writes the final model
    packed_sequence: bool = False
    log_interval: int = 10
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class TranslationError(ValueError):
    pass


def translate(config: dict, stage: str, *, data_path: str, checkpoint_dir: str, export_dir: str,
              gpus: int, hf_model: str | None = None) -> BridgeJob:
    """The stage's resolved config (ctx.config) -> BridgeJob. Raises on settings that cannot run."""
    s = config[stage]
    model, par = config["model"], config["parallel"]
    tp, pp, cp, ep = par["tensor"], par["pipeline"], par["context"], par["expert"]
    problems = []
    if gpus % (tp * pp * cp):
        problems.append(f"{gpus} GPUs are not a multiple of tensor*pipeline*context = {tp * pp * cp}")
    data_parallel = max(1, gpus // (tp * pp * cp))
    if s["global_batch_size"] % (s["micro_batch_size"] * data_parallel):
        problems.append(f"global_batch_size {s['global_batch_size']} is not a multiple of "
                        f"micro_batch_size*data_parallel = {s['micro_batch_size'] * data_parallel}")
    if par.get("sequence_parallel") and tp == 1:
        problems.append("sequence_parallel needs tensor parallelism > 1")
    if problems:
        raise TranslationError(f"{stage}: " + "; ".join(problems))
    opt, sched, ckpt = s["optimizer"], s["scheduler"], s["checkpoint"]
    return BridgeJob(
        mode="pretrain" if stage == "pretrain" else "finetune",
        hf_model=hf_model or model["hf_id"],
        seq_length=model["seq_length"],
        parallel=Parallelism(tp, pp, cp, ep, bool(par.get("sequence_parallel"))),
        training=Training(s["train_iters"], s["global_batch_size"], s["micro_batch_size"]),
        optimizer=Optimizer(opt["name"], opt["lr"], opt.get("min_lr", opt["lr"] * 0.1), opt["weight_decay"],
                            opt.get("adam_beta1", 0.9), opt.get("adam_beta2", 0.95), opt["clip_grad"],
                            bf16=model["precision"].startswith("bf16")),
        scheduler=Scheduler(sched["style"], sched["warmup_iters"]),
        checkpoint=Checkpoint(checkpoint_dir, checkpoint_dir, ckpt["save_interval"], ckpt["format"]),
        data_path=data_path,
        hf_export=export_dir,
        packed_sequence=bool(s.get("packed_sequence", False)),
        log_interval=s.get("log_interval", 10),
    )
