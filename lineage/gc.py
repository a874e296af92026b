"""Verification of every artifact, and garbage collection of the ones nothing keeps.

An artifact is kept when any of these holds: it is the `:latest` of a name, a run used it as an
input, a pinned run produced it, a run's code snapshot is it, or it is younger than the retention
period. Everything else is a candidate; `collect` deletes files and record only when asked.
"""
from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from lineage import refs
from lineage.errors import LineageError
from lineage.layout import Snapshot, kept_snapshots
from lineage.records import read_kind
from lineage.store import Store


def verify_all(store: Store) -> list[tuple[str, str | None]]:
    """(artifact ID or damaged file, problem or None) for every artifact, and every damaged record.

    It reads the record files themselves, not the index, so one damaged record is a finding here
    rather than the error that stops every other command.
    """
    results: list[tuple[str, str | None]] = []
    records = store.records
    for kind in ("run", "event", "location"):
        depth = "*/*.json" if kind == "run" else "*/*/*.json"
        for path in sorted((records / kind).glob(depth)):
            if path.name.startswith("."):
                continue
            try:
                read_kind(path, kind)
            except LineageError as e:
                results.append((str(path), str(e)))
    for path in sorted(store.refs.rglob("v*.json")) if store.refs.is_dir() else []:
        try:
            refs.read(path)
        except LineageError as e:
            results.append((str(path), str(e)))
    for path in sorted((records / "artifact").glob("*/*.json")):
        if path.name.startswith("."):
            continue
        try:
            store.verify(path.stem)
            results.append((path.stem, None))
        except LineageError as e:  # Corrupt files, a Damaged record, or a file name that is no artifact ID
            results.append((path.stem, str(e)))
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
    for name in idx.named():   # what `:latest` resolves to (past versions a reproduction added), and the newest
        why.setdefault(store.resolve_artifact(f"{name}:latest"), f"{name}:latest")
        why.setdefault(refs.resolve(store.refs, f"{name}:latest"), f"{name}:latest")
    for run, art in idx.edges("in"):
        why.setdefault(art, f"input of run {run}")
    pinned = idx.pinned_runs()
    for run, art in idx.edges("out"):
        if run in pinned:
            why.setdefault(art, f"output of pinned run {run}")
    for row in idx.runs():
        snap = store.run_spec(row["id"]).code.get("snapshot")
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


def collect(store: Store, victims: list[Candidate], kept_back: list | None = None) -> int:
    """Delete the artifacts' files and records; returns bytes freed. The index forgets them too.

    Only files inside the store are deleted; an artifact registered from elsewhere loses its record
    but keeps its files. Links are never followed. Files this user may not delete (another member's
    run folder on a team store) keep their record too: (artifact, why) goes to `kept_back`.
    """
    freed = 0
    idx = store.index()
    inside_root = os.path.realpath(store.root) + os.sep
    for c in victims:
        path = Path(c.path)
        inside = os.path.realpath(path.parent).startswith(inside_root) and not path.is_symlink()
        if not inside or (os.path.lexists(path) and idx.shares_path(c.id, c.path)):
            path = None  # outside the store, or another artifact record points at the same files: keep them
        if path is not None and os.path.lexists(path):
            try:
                if path.is_dir():
                    for dirpath, _, _ in os.walk(path):
                        os.chmod(dirpath, os.lstat(dirpath).st_mode | stat.S_IWUSR)
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError as e:
                if kept_back is not None:
                    kept_back.append((c.id, f"{e.strerror or e}: {e.filename or path}"))
                continue
        store.remove_artifact_records(c.id)
        idx.forget_artifact(c.id)
        freed += c.size
    return freed


def top_k_victims(store: Store, k: int, metric: str, higher_is_better: bool) -> list[Snapshot]:
    """Per run and series, every snapshot but the best `k` by `metric`; snapshots without it are kept."""
    victims = []
    for snaps in kept_snapshots(store.root).values():
        scored = [s for s in snaps if isinstance(s.metrics.get(metric), (int, float))]
        scored.sort(key=lambda s: s.metrics[metric], reverse=higher_is_better)
        victims += scored[k:]
    return victims
