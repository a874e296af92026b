"""Sweep records: a grid of one stage's config, submitted together, every point an ordinary run.

A sweep's ID is `swp_` + the first 16 hex digits of the SHA-256 of its points' run keys, in grid
order: the same grid over the same code, inputs and environment is the same sweep, so submitting it
again continues it instead of starting another. `records/sweep/<fan>/<id>.json` holds the grid and
is written once; every submission adds `records/sweep/<fan>/<id>/<uuid7>.json`, naming the run
that stands for each point (one it recorded, or one the run cache or an earlier submission gave).
A point's run is the one named by the newest submission that names it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from lineage.errors import Ambiguous, LineageError, NotFound
from lineage.ids import uuid7
from lineage.records import read_record, write_record

PREFIX = "swp_"
SWEEP_ID = re.compile(rf"^{PREFIX}[0-9a-f]{{16}}$")
SWEEP_PREFIX = re.compile(rf"^{PREFIX}[0-9a-f]{{1,16}}$")


def make_id(run_keys: list[str]) -> str:
    return PREFIX + hashlib.sha256(json.dumps(list(run_keys)).encode()).hexdigest()[:16]


def is_sweep(text: str) -> bool:
    return text.startswith(PREFIX)


def _folder(store, sweep_id: str) -> Path:
    return store.records / "sweep" / sweep_id[-2:]


@dataclass
class SweepView:
    """A sweep as its records say: the grid, and the run standing for each point now."""

    id: str
    recipe: str
    stage: str
    keys: list[str]                    # the swept override keys, in grid order
    points: list[dict]                 # {"values": {key: value}, "overrides": [...], "run_key": ...}
    runs: list[str | None] = field(default_factory=list)   # per point: its run (None: never recorded)
    submissions: list[dict] = field(default_factory=list)
    created: float = 0.0


def write(store, sweep_id: str, body: dict) -> bool:
    """Record the sweep's grid once; False when it is already recorded (a re-submission)."""
    path = _folder(store, sweep_id) / f"{sweep_id}.json"
    if path.exists():
        return False
    return write_record(path, {"id": sweep_id, "created": time.time(), **body}, root=store.root)


def add_submission(store, sweep_id: str, runs: dict[int, str], **facts) -> None:
    """Which run stands for each point after this submission (new, reused or still running)."""
    sid = uuid7()
    write_record(_folder(store, sweep_id) / sweep_id / f"{sid}.json",
                 {"id": sid, "sweep": sweep_id, "time": time.time(),
                  "runs": {str(i): r for i, r in sorted(runs.items())}, **facts}, root=store.root)


def read(store, sweep_id: str) -> SweepView:
    path = _folder(store, sweep_id) / f"{sweep_id}.json"
    if not path.exists():
        raise NotFound(f"no sweep {sweep_id} in {store.root} (see `jobs list --sweep`)")
    body = read_record(path, ("id", "recipe", "stage", "keys", "points"))
    view = SweepView(id=sweep_id, recipe=body["recipe"], stage=body["stage"], keys=list(body["keys"]),
                     points=list(body["points"]), runs=[None] * len(body["points"]), created=body.get("created", 0.0))
    folder = path.with_suffix("")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".json")) if folder.is_dir() else []
    for name in names:   # UUIDv7 names: oldest first
        sub = read_record(folder / name, ("runs",))
        view.submissions.append(sub)
        for i, run in sub["runs"].items():
            if str(i).isdigit() and int(i) < len(view.runs):
                view.runs[int(i)] = run
    return view


def all_ids(store) -> list[str]:
    """Every recorded sweep, oldest first by creation."""
    base = store.records / "sweep"
    if not base.is_dir():
        return []
    found = [p.stem for fan in base.iterdir() if fan.is_dir() for p in fan.glob(f"{PREFIX}*.json")]
    return sorted(found, key=lambda s: read(store, s).created)


def resolve(store, text: str) -> str:
    """A sweep ID, or a unique prefix of one (`swp_` and at least one hex digit)."""
    if not SWEEP_PREFIX.match(text):
        raise LineageError(f"bad sweep ID {text!r}: give swp_ and hex digits (see `jobs list --sweep`)")
    if SWEEP_ID.match(text) and (_folder(store, text) / f"{text}.json").exists():
        return text
    hits = [s for s in all_ids(store) if s.startswith(text)]
    if not hits:
        raise NotFound(f"no sweep {text} in {store.root}")
    if len(hits) > 1:
        raise Ambiguous(f"sweep prefix {text} matches several sweeps; give more characters")
    return hits[0]
