"""nano3's three data preparation stages, one module as in recipe.yaml (`module: stages.prep`).

    prep_pretrain  stages/prep/pretrain.py  Megatron indexed shards + blend, on Ray workers
    prep_sft       stages/prep/sft.py       chats -> Bridge's finetuning JSONL + packed bins; preference pairs
    prep_rl        stages/prep/rl.py        RL prompts with answers and environments; eval set; decontamination

The stage is told apart by its config section (the composed config holds exactly one prep_* section),
so `check_config` works at submit, before a context exists. Imports are deferred to the stage's
own module: `jobs --help` and submit stay fast.
"""
from __future__ import annotations

from pathlib import Path

from stages.contract import StageError

STAGES = ("prep_pretrain", "prep_sft", "prep_rl")


def _module(stage: str):
    """The stage's own module, imported when it is asked for."""
    if stage == "prep_pretrain":
        from stages.prep import pretrain as module
    elif stage == "prep_sft":
        from stages.prep import sft as module
    else:
        from stages.prep import rl as module
    return module


def _which(config: dict) -> str:
    found = [s for s in STAGES if s in config]
    if len(found) != 1:
        raise StageError(f"the config needs one of {', '.join(STAGES)} (found {', '.join(found) or 'none'})")
    return found[0]


def check_config(config: dict) -> list[str]:
    try:
        stage = _which(config)
    except StageError as e:
        return [str(e)]
    return _module(stage).check_config(config)


def preview(config: dict, resources: dict) -> str | None:
    """What the job will do, for --dry-run (the module's own `preview`, if it has one)."""
    module = _module(_which(config))
    return module.preview(config, resources) if hasattr(module, "preview") else None


def run(ctx) -> dict[str, Path]:
    return _module(ctx.stage if ctx.stage in STAGES else _which(ctx.config)).run(ctx)


def gate(ctx, produced: dict[str, Path]) -> list:
    """The prep stage's own checks (stages/gate.py): what each output's manifest says it wrote is there."""
    module = _module(ctx.stage if ctx.stage in STAGES else _which(ctx.config))
    return module.gate(ctx, produced) if hasattr(module, "gate") else []
