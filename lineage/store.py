"""The store on disk.

    <root>/records/run/<fan>/<run_id>.json        the run as submitted (immutable)
    <root>/records/event/<fan>/<run_id>/<event_id>.json   one change to a run: status, attempt, inputs, outputs...
    <root>/records/artifact/<fan>/<art_id>.json   kind, manifest, location, producer
    <root>/refs/<name>/v000001.json               artifact names, append-only
    <root>/runs/<run_id>/                         the run's folder: logs, outputs, checkpoints
    <root>/index.sqlite                           a rebuildable index over records/ and refs/
    <root>/cache/stat.sqlite                      digests of files already hashed

Records are never rewritten: a run's state is the fold of its events in time order.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage import hashing, refs
from lineage.errors import Ambiguous, Corrupt, LineageError, NotFound, StoreUnusable
from lineage.ids import fanout, uuid7
from lineage.records import read_record, write_record

MARKER = "jobs-store.json"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


@dataclass
class RunView:
    """A run as its records say it is now."""

    id: str
    spec: dict
    state: str = "QUEUED"
    reason: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    attempts: list[dict] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    trackers: dict[str, str] = field(default_factory=dict)
    jobs: list[dict] = field(default_factory=list)
    pinned: bool = False
    updated: float = 0.0


def fold(run_id: str, spec: dict, events: list[dict]) -> RunView:
    view = RunView(id=run_id, spec=spec, inputs=dict(spec.get("inputs", {})), updated=spec.get("created", 0.0))
    for ev in sorted(events, key=lambda e: (e["time"], e["id"])):
        kind = ev["kind"]
        if kind == "status":
            view.state, view.reason = ev["state"], ev.get("reason")
        elif kind == "attempt":
            merged = next((a for a in view.attempts if a["attempt"] == ev["attempt"]), None)
            if merged is None:
                view.attempts.append({k: v for k, v in ev.items() if k not in ("id", "kind", "run")})
            else:
                merged.update({k: v for k, v in ev.items() if k not in ("id", "kind", "run", "time")})
        elif kind == "inputs":
            view.inputs.update(ev["inputs"])
        elif kind == "outputs":
            view.outputs.update(ev["outputs"])
        elif kind == "metrics":
            view.metrics.update(ev["metrics"])
        elif kind == "tracker":
            view.trackers.update(ev["trackers"])
        elif kind == "pin":
            view.pinned = ev["pinned"]
        elif kind == "job":
            view.jobs.append({k: v for k, v in ev.items() if k not in ("id", "kind", "run")})
        view.updated = max(view.updated, ev["time"])
    return view


class Store:
    def __init__(self, root: Path):
        self.root = Path(root).absolute()
        self.records = self.root / "records"
        self.refs = self.root / "refs"

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, root: Path | str, *, create: bool = False) -> "Store":
        """Open a store; with `create`, make it if missing. Fails on a path that cannot be used."""
        store = cls(Path(root).expanduser())
        marker = store.root / MARKER
        if marker.exists():
            if create and not os.access(store.root, os.W_OK):
                raise StoreUnusable(f"store {store.root} is not writable")
            return store
        if not create:
            raise StoreUnusable(f"no store at {store.root} (submit a run to create it, or pass --store / set JOBS_HOME)")
        if store.root.exists() and not store.root.is_dir():
            raise StoreUnusable(f"store path {store.root} is not a directory")
        parent = next((p for p in [store.root, *store.root.parents] if p.exists()), None)
        if parent is None or not os.access(parent, os.W_OK):
            raise StoreUnusable(f"store path {store.root} is not writable")
        if store.root.exists() and any(store.root.iterdir()):
            raise StoreUnusable(f"{store.root} is a non-empty folder that is not a jobs store")
        try:
            store.root.mkdir(parents=True, exist_ok=True)
            write_record(marker, {"format": 1, "created": time.time()}, exclusive=True)
        except PermissionError as e:
            raise StoreUnusable(f"store path {store.root} is not writable ({e.strerror})") from None
        return store

    def ensure_writable(self) -> None:
        probe = self.root / f".probe-{os.getpid()}"
        try:
            probe.touch()
            probe.unlink()
        except OSError as e:
            raise StoreUnusable(f"store {self.root} is not writable ({e.strerror})") from None

    # ---- paths ---------------------------------------------------------------------------
    def _path(self, kind: str, ident: str) -> Path:
        return self.records / kind / fanout(ident) / f"{ident}.json"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    # ---- runs ----------------------------------------------------------------------------
    def create_run(self, spec: dict) -> str:
        run_id = uuid7()
        write_record(self._path("run", run_id), {"id": run_id, "created": time.time(), **spec})
        self.add_event(run_id, "status", state="QUEUED")
        return run_id

    def add_event(self, run_id: str, kind: str, **data: Any) -> None:
        event_id = uuid7()
        path = self.records / "event" / fanout(run_id) / run_id / f"{event_id}.json"
        write_record(path, {"id": event_id, "run": run_id, "kind": kind, "time": time.time(), **data})
        # A new file changes only its own folder's mtime; touching the fan folder too lets the index
        # skip, at a glance, every fan where no run got a new event.
        os.utime(path.parent.parent)

    def events(self, run_id: str) -> list[dict]:
        folder = self.records / "event" / fanout(run_id) / run_id
        if not folder.is_dir():
            return []
        return [read_record(p) for p in folder.iterdir() if not p.name.startswith(".")]

    def run_spec(self, run_id: str) -> dict:
        path = self._path("run", run_id)
        if not path.exists():
            raise NotFound(f"no run {run_id} in {self.root}")
        return read_record(path)

    def run(self, run_id: str) -> RunView:
        """The run's current view, read from its records (the index is not needed)."""
        return fold(run_id, self.run_spec(run_id), self.events(run_id))

    # ---- artifacts -----------------------------------------------------------------------
    def register(self, path: Path, *, kind: str, name: str | None = None, run: str | None = None,
                 metadata: dict | None = None) -> str:
        """Make `path` an immutable artifact in place and return its ID.

        The files are made read-only, hashed, and only then is the record renamed into place: a
        registration killed at any point leaves no record, so nothing half-made is ever visible.
        """
        path = Path(path).absolute()
        if not path.exists():
            raise NotFound(f"cannot register {path}: it does not exist")
        if name:
            refs.check_name(name)
        make_read_only(path)
        cache = hashing.StatCache(self.root / "cache" / "stat.sqlite")
        try:
            entries = hashing.manifest(path, cache)
        finally:
            cache.close()
        art_id = hashing.artifact_id(entries)
        record = {
            "id": art_id,
            "kind": kind,
            "path": str(path),
            "is_dir": path.is_dir(),
            "manifest": entries,
            "size": sum(e["size"] for e in entries),
            "producer": run,
            "name": name,
            "metadata": metadata or {},
            "created": time.time(),
        }
        write_record(self._path("artifact", art_id), record, exclusive=True)
        if name:
            refs.add(self.refs, name, art_id, run)
        return art_id

    def artifact(self, art_id: str) -> dict:
        path = self._path("artifact", art_id)
        if not path.exists():
            raise NotFound(f"no artifact {art_id} in {self.root} (see `jobs artifacts`)")
        return read_record(path)

    def resolve_artifact(self, text: str) -> str:
        """A full ID, a unique ID prefix (`art_3f9c`), or an alias (`tiny/data/sft:latest`) -> full ID."""
        if text.startswith("art_"):
            prefix = text
            if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix[4:]):
                raise LineageError(f"bad artifact ID {text!r}: expected art_ and at least 4 hex digits")
            folder = self.records / "artifact" / prefix[4:6]
            hits = sorted(p.stem for p in folder.glob(f"{prefix}*.json")) if folder.is_dir() else []
            if not hits:
                raise NotFound(f"no artifact {text} in {self.root} (see `jobs artifacts`)")
            if len(hits) > 1:
                raise Ambiguous(f"artifact prefix {text} matches {len(hits)} artifacts; give more digits")
            return hits[0]
        if ":" in text:
            return refs.resolve(self.refs, text)
        raise LineageError(f"{text!r} is neither an artifact ID (art_…) nor an alias (name:latest, name:vN)")

    def verify(self, art_id: str) -> None:
        """Re-hash the artifact's files; raise Corrupt naming every difference."""
        record = self.artifact(art_id)
        path = Path(record["path"])
        if not path.exists():
            raise Corrupt(f"{art_id}: its files at {path} are gone")
        now = {e["path"]: e for e in hashing.manifest(path)}
        was = {e["path"]: e for e in record["manifest"]}
        problems = [f"missing {p}" for p in sorted(was.keys() - now.keys())]
        problems += [f"unexpected {p}" for p in sorted(now.keys() - was.keys())]
        problems += [f"changed {p}" for p in sorted(was.keys() & now.keys()) if was[p] != now[p]]
        if problems:
            raise Corrupt(f"{art_id} at {path}: " + ", ".join(problems))

    # ---- index ---------------------------------------------------------------------------
    def index(self):
        from lineage.index import Index

        idx = Index(self)
        idx.sync()
        return idx


def make_read_only(path: Path) -> None:
    """Drop write bits everywhere below `path`, files first, then folders bottom-up."""
    def drop(p: Path) -> None:
        mode = p.lstat().st_mode
        p.chmod(stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    if path.is_file():
        drop(path)
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            drop(Path(dirpath) / name)
        drop(Path(dirpath))
