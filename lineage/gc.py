"""Verification of every artifact, and garbage collection of the ones nothing keeps.

An artifact is kept when any of these holds: it is the `:latest` of a name, a run used it as an
input, a pinned run produced it, a run's code snapshot is it, or it is younger than the retention
period. Everything else is a candidate; `collect` deletes files and record only when asked.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from lineage import refs
from lineage.errors import Corrupt
from lineage.store import Store


def verify_all(store: Store) -> list[tuple[str, str | None]]:
    """(artifact ID, problem or None) for every artifact in the store."""
    results = []
    for row in store.index().artifacts():
        try:
            store.verify(row["id"])
            results.append((row["id"], None))
        except Corrupt as e:
            results.append((row["id"], str(e)))
    return results


@dataclass
class Candidate:
    id: str
    kind: str
    path: str
    size: int
    age_days: float


def kept(store: Store) -> dict[str, str]:
    """Artifact ID -> why it is kept."""
    idx = store.index()
    why: dict[str, str] = {}
    for (name,) in idx.db.execute("SELECT DISTINCT name FROM refs"):
        why.setdefault(refs.resolve(store.refs, f"{name}:latest"), f"{name}:latest")
    for run, art in idx.db.execute("SELECT run, artifact FROM edges WHERE direction='in'"):
        why.setdefault(art, f"input of run {run}")
    latest_pin: dict[str, bool] = {}
    for run, body in idx.db.execute("SELECT run, body FROM events WHERE kind='pin' ORDER BY time, id"):
        latest_pin[run] = json.loads(body)["pinned"]
    pinned = {r for r, p in latest_pin.items() if p}
    for run, art in idx.db.execute("SELECT run, artifact FROM edges WHERE direction='out'"):
        if run in pinned:
            why.setdefault(art, f"output of pinned run {run}")
    for row in idx.runs():
        snap = store.run_spec(row["id"]).get("code", {}).get("snapshot")
        if snap:
            why.setdefault(snap, f"code of run {row['id']}")
    return why


def candidates(store: Store, older_than_days: float) -> list[Candidate]:
    keep = kept(store)
    now = time.time()
    out = []
    for row in store.index().artifacts():
        age = (now - row["created"]) / 86400
        if row["id"] not in keep and age >= older_than_days:
            out.append(Candidate(row["id"], row["kind"], row["path"], row["size"], age))
    return out


def collect(store: Store, victims: list[Candidate]) -> int:
    """Delete the artifacts' files and records; returns bytes freed. The index forgets them too."""
    freed = 0
    idx = store.index()
    for c in victims:
        path = Path(c.path)
        if path.exists() and _shared(store, c):
            path = None  # another artifact record points at the same files: keep them
        if path is not None and path.exists():
            for dirpath, _, filenames in os.walk(path):
                os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR)
            shutil.rmtree(path)
        (store.records / "artifact" / c.id[4:6] / f"{c.id}.json").unlink(missing_ok=True)
        with idx.db:
            idx.db.execute("DELETE FROM artifacts WHERE id=?", (c.id,))
        freed += c.size
    return freed


def _shared(store: Store, c: Candidate) -> bool:
    idx = store.index()
    return idx.db.execute("SELECT count(*) FROM artifacts WHERE path=? AND id != ?", (c.path, c.id)).fetchone()[0] > 0


@dataclass
class Snapshot:
    run: str
    series: str
    step: int
    metrics: dict
    files: list[Path]


def checkpoint_snapshots(store: Store) -> dict[tuple[str, str], list[Snapshot]]:
    """Kept training snapshots (`runs/<run>/checkpoints/keep/<series>-step<N>.{pt,json}`) by run and series."""
    groups: dict[tuple[str, str], list[Snapshot]] = {}
    for meta in sorted((store.root / "runs").glob("*/checkpoints/keep/*.json")):
        run = meta.parents[2].name
        series, _, step = meta.stem.rpartition("-step")
        info = json.loads(meta.read_text())
        groups.setdefault((run, series), []).append(
            Snapshot(run, series, int(step), info.get("metrics", {}), [meta, meta.with_suffix(".pt")]))
    return groups


def top_k_victims(store: Store, k: int, metric: str, higher_is_better: bool) -> list[Snapshot]:
    """Per run and series, every snapshot but the best `k` by `metric`; snapshots without it are kept."""
    victims = []
    for snaps in checkpoint_snapshots(store).values():
        scored = [s for s in snaps if isinstance(s.metrics.get(metric), (int, float))]
        scored.sort(key=lambda s: s.metrics[metric], reverse=higher_is_better)
        victims += scored[k:]
    return victims
