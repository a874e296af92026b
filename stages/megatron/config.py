"""Our stage config -> Megatron-Bridge's configuration, as plain typed data.

nano3's pretrain and sft sections already use Megatron-Bridge's own names: `model` holds the
provider's parallel sizes (set on `AutoBridge.from_hf_pretrained(...).to_megatron_provider()`
before `finalize()`), and `train`, `optimizer`, `scheduler`, `checkpoint`, `logger` are the fields
of Bridge's `TrainingConfig`, `OptimizerConfig`, `SchedulerConfig`, `CheckpointConfig` and
`LoggerConfig`. This module checks them against the allocation (what would otherwise fail after
the queue wait) and fills in what the run decides: data, checkpoint and export paths, the model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

PROVIDER_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                 "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
                 "calculate_per_token_loss")


@dataclass(frozen=True)
class BridgeJob:
    """Everything one Megatron-Bridge run needs, section by section, in Bridge's field names."""

    mode: str                     # "pretrain" | "finetune"
    hf_model: str                 # what AutoBridge.from_hf_pretrained reads
    hf_revision: str | None
    trust_remote_code: bool
    seq_length: int
    provider: dict                # attributes set on the model provider before finalize()
    train: dict                   # TrainingConfig
    optimizer: dict               # megatron.core.optimizer.OptimizerConfig
    scheduler: dict               # SchedulerConfig
    checkpoint: dict              # CheckpointConfig (save/load filled in)
    logger: dict                  # LoggerConfig
    data_path: str
    hf_export: str                # where the final model is exported in HF format
    packed_sequence: bool = False
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class TranslationError(ValueError):
    pass


def translate(config: dict, stage: str, *, data_path: str, checkpoint_dir: str, export_dir: str,
              gpus: int, hf_model: str | None = None) -> BridgeJob:
    """The stage's resolved config (ctx.config) -> BridgeJob; all problems reported at once."""
    s = config[stage]
    model = s["model"]
    tp, pp, cp = (int(model.get(k, 1)) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                   "context_parallel_size"))
    ep = int(model.get("expert_model_parallel_size", 1))
    train = dict(s["train"])
    problems = []
    if gpus % (tp * pp * cp):
        problems.append(f"{gpus} GPUs are not a multiple of tensor*pipeline*context = {tp * pp * cp}")
    data_parallel = max(1, gpus // (tp * pp * cp))
    if (data_parallel * cp) % ep:
        problems.append(f"expert_model_parallel_size {ep} does not divide data*context parallel = {data_parallel * cp}")
    if train["global_batch_size"] % (train["micro_batch_size"] * data_parallel):
        problems.append(f"global_batch_size {train['global_batch_size']} is not a multiple of "
                        f"micro_batch_size*data_parallel = {train['micro_batch_size'] * data_parallel}")
    if model.get("sequence_parallel") and tp == 1:
        problems.append("sequence_parallel needs tensor_model_parallel_size > 1")
    if problems:
        raise TranslationError(f"{stage}: " + "; ".join(problems))
    seq_length = model.get("seq_length") or s.get("dataset", {}).get("seq_length")
    base = config.get("base_model", {})
    scheduler = dict(s["scheduler"])
    if scheduler.get("lr_decay_iters") is None:
        scheduler["lr_decay_iters"] = train["train_iters"]
    return BridgeJob(
        mode="pretrain" if stage == "pretrain" else "finetune",
        hf_model=hf_model or base["hf_model_id"],
        hf_revision=None if hf_model else base.get("hf_model_revision"),
        trust_remote_code=bool(base.get("trust_remote_code", False)),
        seq_length=int(seq_length),
        provider={k: model[k] for k in PROVIDER_KEYS if k in model},
        train=train,
        optimizer=dict(s["optimizer"]),
        scheduler=scheduler,
        checkpoint={**s["checkpoint"], "save": checkpoint_dir, "load": checkpoint_dir},
        logger=dict(s.get("logger", {})),
        data_path=data_path,
        hf_export=export_dir,
        packed_sequence=bool(s.get("dataset", {}).get("packed_sequence", False)),
    )
