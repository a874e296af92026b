"""nano3's three data preparation stages, one module as in recipe.yaml (`module: stages.prep`).

    prep_pretrain  stages/prep/pretrain.py  Megatron indexed shards + blend, on Ray workers
    prep_sft       stages/prep/sft.py       chats -> Bridge's finetuning JSONL + packed bins; preference pairs
    prep_rl        stages/prep/rl.py        RL prompts with answers and environments; eval set; decontamination

The stage is told apart by its config section (the composed config holds exactly one prep_* section),
so `check_config` works at submit, before a context exists. Imports are deferred to the stage's
own module: `jobs --help` and submit stay fast.
"""
from __future__ import annotations

import importlib
from pathlib import Path

STAGES = {"prep_pretrain": "stages.prep.pretrain", "prep_sft": "stages.prep.sft", "prep_rl": "stages.prep.rl"}


def _which(config: dict) -> str:
    found = [s for s in STAGES if s in config]
    if len(found) != 1:
        raise KeyError(f"one of {', '.join(STAGES)} (found {', '.join(found) or 'none'})")
    return found[0]


def check_config(config: dict) -> list[str]:
    return importlib.import_module(STAGES[_which(config)]).check_config(config)


def preview(config: dict, resources: dict) -> str | None:
    """What the job will do, for --dry-run (the module's own `preview`, if it has one)."""
    module = importlib.import_module(STAGES[_which(config)])
    return module.preview(config, resources) if hasattr(module, "preview") else None


def run(ctx) -> dict[str, Path]:
    stage = ctx.stage if ctx.stage in STAGES else _which(ctx.config)
    return importlib.import_module(STAGES[stage]).run(ctx)
