"""`jobs compare RUN…|RECIPE` and `jobs diff RUN_A RUN_B`: how runs differ, and what they scored.

compare prints one table per stage: a row per run, a column per config key whose value differs
between the runs, then a column per metric (the last value each run logged), so the best run of a
sweep or of a week's tries is found by reading, not by a script over artifact folders.
"""
from __future__ import annotations

import json
import re

from jobs.errors import JobsError
from jobs.metrics import check_known, deltas, duration, facts, number, timing


def diff_command(store, a: str, b: str) -> int:
    """What differs (config, code, environment, inputs, outputs, metrics); exit 1 when anything
    does but timing measures, like diff(1), so scripts can ask whether two runs differ."""
    from jobs.reproduce import diff

    idx = store.index()
    ra, rb = idx.resolve_run(a), idx.resolve_run(b)
    lines = diff(store, ra, rb)
    moved = deltas(store.run(ra).metrics, store.run(rb).metrics)
    counted = bool(lines) or any(c for _, c in moved)
    if not counted:   # the verdict first; timings that moved follow, for information
        lines = ["no differences in config, code, environment, inputs, outputs or metrics"]
    print("\n".join(lines + [line for line, _ in moved]))
    return 1 if counted else 0


def runs_of(store, targets: list[str], stage: str | None, limit: int) -> list[str]:
    """Run IDs (or prefixes), or one recipe name: its newest `limit` runs (of `stage`, when given)."""
    idx = store.index()
    if len(targets) == 1 and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", targets[0]) and not _is_run(idx, targets[0]):
        rows = idx.runs(recipe=targets[0], stage=stage, limit=limit)
        if not rows:
            from jobs import recipes
            if targets[0] not in recipes.available():
                raise JobsError(f"{targets[0]!r} is neither a run ID nor a recipe (recipes: {', '.join(recipes.available())})")
            raise JobsError(f"no runs of recipe {targets[0]}{f' stage {stage}' if stage else ''} in {store.root}")
        return [r["id"] for r in rows]
    if len(targets) < 2:
        raise JobsError("compare needs two or more runs (IDs or prefixes, see `jobs list`), or one recipe name")
    runs = [idx.resolve_run(t) for t in targets]
    return list(dict.fromkeys(runs))


def _is_run(idx, text: str) -> bool:
    from lineage.errors import LineageError
    try:
        idx.resolve_run(text)
        return True
    except LineageError:
        return False


def table(store, run_ids: list[str], metrics: list[str] | None = None) -> dict:
    """{stage: {"keys": differing config keys, "inputs": differing input roles, "metrics": metric names,
    "runs": [row, ...]}}."""
    from jobs.reproduce import flatten

    from jobs.chains import describe

    idx = store.index()
    by_stage: dict[str, list] = {}
    for r in run_ids:
        view = store.run(r)
        by_stage.setdefault(f"{view.spec.recipe}/{view.spec.stage}", []).append(view)
    summaries = [v.metrics for views in by_stage.values() for v in views]
    for name in metrics or []:
        check_known(name, summaries)
    out = {}
    for stage, views in by_stage.items():
        flat = {v.id: flatten(v.spec.config) for v in views}
        keys = sorted({k for f in flat.values() for k in f})
        differing = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat.values()}) > 1]
        names = metrics or sorted({k for v in views for k in v.metrics if not timing(k)})
        roles = sorted({k for v in views for k in v.inputs})
        moved = [k for k in roles if len({v.inputs.get(k) for v in views}) > 1]   # inputs that differ, by version
        rows = []
        for v in views:
            f = facts(v)
            rows.append({"id": v.id, "state": v.state, "duration_s": f["duration_s"],
                         "config": {k: flat[v.id].get(k) for k in differing},
                         "metrics": {k: v.metrics.get(k) for k in names},
                         "inputs": {k: v.inputs.get(k) for k in moved},
                         "input_names": {k: describe(idx, v.inputs[k]) if v.inputs.get(k) else None for k in moved}})
        out[stage] = {"keys": differing, "inputs": moved, "metrics": names, "runs": rows}
    return out


def render(tables: dict) -> str:
    lines = []
    for stage, t in tables.items():
        head = ["RUN", "STATE", "TOOK", *t["keys"], *(f"input {k}" for k in t["inputs"]), *t["metrics"]]
        body = [[r["id"][:13], r["state"] or "?", duration(r["duration_s"]),
                 *(_cell(r["config"][k]) for k in t["keys"]), *(r["input_names"][k] or "-" for k in t["inputs"]),
                 *(number(r["metrics"][k]) for k in t["metrics"])]
                for r in t["runs"]]
        widths = [max(len(str(row[i])) for row in [head, *body]) for i in range(len(head))]
        lines.append(f"## {stage}: {len(t['runs'])} run(s)" + ("" if t["keys"] or t["inputs"] else ", the same config and inputs"))
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _cell(value) -> str:
    return "<unset>" if value is None else (value if isinstance(value, str) else json.dumps(value))


def command(store, targets: list[str], stage: str | None, metrics: list[str] | None, limit: int, as_json: bool) -> int:
    from jobs.show import print_json

    tables = table(store, runs_of(store, targets, stage, limit), metrics)
    if as_json:
        print_json(tables)
    else:
        print(render(tables))
    return 0
