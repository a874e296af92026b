"""What a submit would run, before anything is recorded: a local dry run's text, and what a stage will
launch inside its job when its module can tell without running (`preview(config, resources)`: the
Megatron-Bridge overrides, the NeMo RL config and command)."""
from __future__ import annotations

import json


def stage_preview(module: str, config: dict, resources: dict) -> str | None:
    """The stage module's own preview of this config, None when it has none (or is not installed here)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return None
    preview = getattr(importlib.import_module(module), "preview", None)
    return preview(config, resources) if preview else None


def format_plan(plan, store=None) -> str:
    """A local dry run: what each stage would run with (its inputs by ID and by the name each was
    registered as, when `store` is given), and what it would launch when its module can tell."""
    from jobs.chains import own_name

    idx = store.index() if store is not None and any(sp.inputs for sp in plan.stages) else None

    def named(art: str) -> str:
        own = own_name(idx, art) if idx is not None else None
        return f"  ({own})" if own else ""

    out = []
    for sp in plan.stages:
        out.append(f"### {sp.recipe}/{sp.stage}  ({sp.module})")
        out += [f"input  {role:<10} {art}{named(art)}" for role, art in sorted(sp.inputs.items())]
        out += [f"input  {role:<10} <- {stage}.{o} of this submission" for role, (stage, o) in sorted(sp.upstream.items())]
        out.append("config " + json.dumps(sp.config, sort_keys=True))
        text = stage_preview(sp.module, sp.config, sp.resources)
        if text:
            out.append(text.rstrip("\n"))
    return "\n".join(out)
