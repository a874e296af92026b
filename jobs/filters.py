"""Filter values (`--kind`, `--recipe`, `--stage`, `--metric`) checked against what exists: a typo
is refused with the known values, instead of an empty listing and exit 0 that reads as "none";
`--limit` checked against what SQLite can take."""
from __future__ import annotations

import difflib
from typing import Iterable

from jobs.errors import JobsError


def check(option: str, value: str | None, known: Iterable[str]) -> None:
    """JobsError naming the closest known value and all of them, when `value` is not one."""
    known = sorted(set(known))
    if value is None or value in known:
        return
    near = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    listed = ", ".join(known[:40]) + (", ..." if len(known) > 40 else "") if known else "none here yet"
    raise JobsError(f"unknown {option} value {value!r} ({hint}known: {listed})")


def recipe_words(which: str) -> set[str]:
    """Every recipe name, or every stage name or output kind of every recipe (`which`)."""
    from jobs import recipes

    out: set[str] = set()
    for name in recipes.available():
        if which == "recipe":
            out.add(name)
            continue
        for s in recipes.load(name).stages.values():
            out |= {s.name} if which == "stage" else set(s.outputs.values())
    return out


def check_runs_filter(idx, recipe: str | None, stage: str | None) -> None:
    """`jobs list --recipe/--stage`: the recipes' own names and those the store's runs carry."""
    rows = idx.db.execute("SELECT DISTINCT recipe, stage FROM runs").fetchall() if recipe or stage else []
    check("--recipe", recipe, recipe_words("recipe") | {r[0] for r in rows})
    check("--stage", stage, recipe_words("stage") | {r[1] for r in rows})


def check_artifacts_filter(idx, recipe: str | None, kind: str | None) -> None:
    """`jobs artifacts --recipe/--kind`: the recipes' names and kinds, and the kinds the store holds."""
    check("--recipe", recipe, recipe_words("recipe") | {r[0] for r in idx.db.execute("SELECT DISTINCT recipe FROM runs")})
    if kind:
        check("--kind", kind, recipe_words("kind") | {r[0] for r in idx.db.execute("SELECT DISTINCT kind FROM artifacts")})


#: SQLite's largest integer: a larger --limit is no integer to it.
SQLITE_MAX = 2**63 - 1


def check_limit(limit: int) -> int:
    """--limit as SQLite can take it: 1 to 2**63 - 1."""
    if limit < 1:
        raise JobsError(f"--limit must be at least 1 (got {limit})")
    if limit > SQLITE_MAX:
        raise JobsError(f"--limit must be at most {SQLITE_MAX} (got {limit})")
    return limit


def check_failed(value: str | None) -> None:
    """`jobs list --failed CLASS`: one of lineage/failures.py's classes, or one line and exit 2."""
    from lineage.failures import CLASSES

    check("--failed", value, CLASSES)
