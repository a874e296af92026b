"""The store on disk.

    <root>/records/run/<fan>/<run_id>.json        the run as submitted (immutable)
    <root>/records/event/<fan>/<run_id>/<event_id>.json   one change to a run: status, attempt, inputs, outputs...
    <root>/records/artifact/<fan>/<art_id>.json   kind, manifest, location, producer
    <root>/records/location/<fan>/<art_id>/<id>.json   a later, verified copy of an artifact's files
    <root>/refs/<name>/v000001.json               artifact names, append-only
    <root>/runs/<run_id>/                         the run's folder: logs, outputs, checkpoints
    <root>/code/<art_id>/, <root>/imports/<id>/   code snapshots, what `jobs add` copied in
and, per host and never in the shared store (SQLite locking is not safe on NFS or Lustre):
    <cache>/index.sqlite, index.lock              a rebuildable index over records/ and refs/
    <cache>/stat.sqlite                           digests of files already hashed
where <cache> is $JOBS_CACHE_DIR (else $XDG_CACHE_HOME/jobs, else ~/.cache/jobs) / <hostname> /
the first 16 hex digits of the SHA-256 of the store's real path.

Records are never rewritten: a run's state is the fold of its events in time order.

Healing. An artifact ID names content, so a re-run that produces the same bytes gets the same ID.
If the files the artifact record points at no longer verify (tampered, half-deleted, gone), the
re-registration appends a location record pointing at the new, verified copy instead of silently
keeping the bad one; the artifact record itself stays as written. Readers (`artifact()`) take the
newest location, so inputs, `:latest` and reproductions use the healed bytes from then on.

Safety. Registration lstat-s every entry before it changes anything: a symbolic link, FIFO,
socket, device, or a hard link to a writable file outside the artifact is refused in one line and
nothing is made read-only; then files are made read-only through descriptors opened without
following links. Verification never opens anything but regular files, so it cannot hang on a FIFO.
Every record read is checked for its shape, and a damaged file is a `Damaged` error naming it.
Nothing below the root is written through a symbolic link: `open` refuses a store whose own folders
are links, and records, run folders and artifacts are reached from the root by descriptors opened
without following links (`records.open_folder`).

Paths. Records hold the store's own files relative to the root (`locate` reads them, and old
absolute ones), so a moved or copied store acts on its own files only.

Permissions. The root folder's mode says who may read the store: new folders take their parent's
mode, artifacts and records get the root's read bits (`share_modes`), so a team store (root group
TEAM, mode 2770) is readable by the whole group, weights included.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage import hashing, refs
from lineage.errors import Ambiguous, Corrupt, Damaged, LineageError, NotFound, StoreUnusable, Unsafe, show_path
from lineage.ids import fanout, uuid7
from lineage.layout import CODE, IMPORTS, RECORDS, REFS, RUNS, RUNTIME, SWEEPS, import_path, run_path
from lineage.records import open_folder, read_kind, write_record
from lineage.runspec import RunSpec
from lineage.states import RunState

MARKER = "jobs-store.json"
ART_ID = re.compile(r"^art_[0-9a-f]{64}$")
RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: The store's own folders: none of them may be a symbolic link (Store.open refuses the store).
OWN_FOLDERS = (RECORDS, *(f"{RECORDS}/{kind}" for kind in ("run", "event", "artifact", "location")), REFS, RUNS,
               CODE, IMPORTS, RUNTIME, SWEEPS)
#: Event fields that hold a path: recorded relative to the store root, shown absolute in this store.
PATH_FIELDS = ("folder", "tensorboard", "wandb")


def cache_dir(root: Path) -> Path:
    """This host's cache folder for the store at `root`: the index and the stat cache live here."""
    base = os.environ.get("JOBS_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "jobs"
    key = hashing.hash_bytes(os.path.realpath(root).encode()).value[:16]
    return Path(base) / socket.gethostname() / key


@dataclass
class RunView:
    """A run as its records say it is now."""

    id: str
    spec: RunSpec
    state: str = RunState.QUEUED
    reason: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    attempts: list[dict] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    trackers: dict[str, str] = field(default_factory=dict)
    #: The results gate's checks of the last attempt that reached it (stages/gate.py): name, ok, detail.
    gate: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    pinned: bool = False
    updated: float = 0.0

    def open_attempts(self) -> list[dict]:
        """The attempts that started and recorded no end yet (one still running, or one that died silently)."""
        return [a for a in self.attempts if a.get("start") and not a.get("end") and "exit" not in a]


def fold(run_id: str, spec: RunSpec, events: list[dict]) -> RunView:
    view = RunView(id=run_id, spec=spec, inputs=dict(spec.inputs), updated=spec.created or 0.0)
    for ev in sorted(events, key=lambda e: (e["time"], e["id"])):
        kind = ev["kind"]
        if kind == "status":
            # A cancel is final: a job whose start raced the scancel (it read its run before the
            # cancel, and Slurm kills it only after KillWait) still records its attempt, not a state.
            if view.state != RunState.CANCELLED:
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
        elif kind == "gate":
            view.gate = list(ev["checks"])
        elif kind == "pin":
            view.pinned = ev["pinned"]
        elif kind == "job":
            view.jobs.append({k: v for k, v in ev.items() if k not in ("id", "kind", "run")})
        view.updated = max(view.updated, ev["time"])
    return view


class Store:
    def __init__(self, root: Path):
        self.root = Path(root).absolute()
        self.records = self.root / RECORDS   # lineage/ only: the launcher asks by meaning
        self.refs = self.root / REFS

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, root: Path | str, *, create: bool = False) -> "Store":
        """Open a store; with `create`, make it if missing. Fails on a path that cannot be used.

        Two first submits may create the same new store at once: the marker is written with an
        exclusive link, a folder holding only another creator's half-written marker counts as empty,
        and whoever loses the race opens the winner's store.
        """
        store = cls(Path(root).expanduser())
        marker = store.root / MARKER
        if os.path.islink(marker):
            raise StoreUnusable(f"store {show_path(store.root)}: {MARKER} is a symbolic link; a store's own files "
                                "are never links (move it away)")
        if marker.exists():
            store.check_own_folders()
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
        try:
            store.root.mkdir(parents=True, exist_ok=True)
            foreign = [n for n in os.listdir(store.root) if n != MARKER and not n.startswith(f".{MARKER}.")]
            # A creator writes the marker before anything else, so anything else without it is not ours.
            if foreign and not marker.exists():
                raise StoreUnusable(f"{store.root} is a non-empty folder that is not a jobs store")
            if write_record(marker, {"format": 1, "created": time.time()}, exclusive=True):
                for top in (RECORDS, REFS, RUNS, CODE, IMPORTS):  # with the root's mode, for a team
                    store.folder(top)
        except PermissionError as e:
            raise StoreUnusable(f"store path {store.root} is not writable ({e.strerror})") from None
        return store

    def check_own_folders(self) -> None:
        """Refuse, in one line, a store one of whose own folders (records/, runs/, code/, imports/,
        refs/, ...) is a symbolic link or not a folder: writing there would write wherever it points."""
        for rel in OWN_FOLDERS:
            try:
                st = os.lstat(self.root / rel)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise StoreUnusable(f"store {show_path(self.root)}: cannot read {rel}/ ({e.strerror})") from None
            if not stat.S_ISDIR(st.st_mode):
                kind = (f"a symbolic link (to {show_path(os.readlink(self.root / rel))})" if stat.S_ISLNK(st.st_mode)
                        else "not a folder")
                raise StoreUnusable(f"store {show_path(self.root)}: its folder {rel}/ is {kind}; a store's own "
                                    "folders must be real folders inside it (move the link away)")

    @property
    def mode(self) -> int:
        """The root folder's permission bits: who may read the store (see `share_modes`)."""
        return stat.S_IMODE(os.stat(self.root).st_mode)

    def folder(self, rel: str | Path, *, create: bool = True) -> Path:
        """`root/rel`, made when missing (each new folder with its parent's mode), reached without
        following a link: a link planted anywhere on the way is Unsafe, never written through."""
        os.close(open_folder(self.root, Path(rel), create=create))
        return self.root / rel

    def inside(self, path: Path) -> Path | None:
        """`path` relative to the root when it lies in the store (as written, or once links above
        the store are resolved), else None."""
        for mine, theirs in ((self.root, os.path.abspath(path)),
                             (Path(os.path.realpath(self.root)), os.path.realpath(path))):
            try:
                rel = Path(theirs).relative_to(mine)
            except ValueError:
                continue
            return rel if rel.parts else None
        return None

    def stored_path(self, path: Path) -> str:
        """How a record holds `path`: relative to the root when it lies in the store, so a moved or
        copied store still finds its own files; absolute for files registered from elsewhere."""
        rel = self.inside(path)
        return rel.as_posix() if rel is not None else str(Path(path).absolute())

    def locate(self, recorded: str, *, producer: str | None = None, art_id: str | None = None) -> Path:
        """Where a recorded path is in this store.

        A relative path is under this root (a `..` in it is Damaged). An absolute path comes from a
        record written before paths were relative: when it has the store's own layout, the part from
        `runs/<producer>/`, `code/<art_id>` or `imports/<id>/<name>` on is taken in this store,
        wherever the store was then (so a copy never reads or deletes the original's files); any
        other absolute path is a file registered from outside the store, used where it is.
        """
        if not os.path.isabs(recorded):
            rel = Path(recorded)
            if any(part in ("..", "") for part in rel.parts) or not rel.parts:
                raise Damaged(f"damaged store record: path {show_path(recorded)!r} leaves the store")
            return self.root / rel
        path = Path(recorded)
        if self.inside(path) is not None:
            return path
        parts = path.parts
        for i in range(len(parts) - 1, 0, -1):
            tail = parts[i:]
            if ((tail[0] == RUNS and len(tail) >= 3 and producer and tail[1] == producer)
                    or (tail[0] == CODE and len(tail) == 2 and art_id and tail[1] == art_id)
                    or (tail[0] == IMPORTS and len(tail) == 3 and RUN_ID.match(tail[1]))):
                return self.root.joinpath(*tail)
        return path

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
        """The run's folder (its layout: lineage.layout.RunDir). Refused (Unsafe) when `runs/` or the
        run's folder is a symbolic link: a job would write its outputs and logs wherever the link points."""
        folder = run_path(self.root, run_id)
        for p in (folder.parent, folder):
            if os.path.islink(p):
                raise Unsafe(f"store {show_path(self.root)}: {show_path(p.relative_to(self.root))} is a symbolic "
                             "link; a run's folder must be a real folder inside the store (move the link away)")
        return folder

    def has_records(self) -> bool:
        """Whether anything was ever recorded here."""
        return (self.root / RECORDS).exists()

    def has_artifact(self, art_id: str) -> bool:
        return os.path.lexists(self._path("artifact", art_id))

    @property
    def cache(self) -> Path:
        return cache_dir(self.root)

    def stat_cache(self) -> hashing.StatCache:
        return hashing.StatCache(self.cache / "stat.sqlite")

    # ---- runs ----------------------------------------------------------------------------
    def create_run(self, spec: RunSpec | dict) -> str:
        """Record a QUEUED run and make its folder. Every folder it writes in is checked (no link on
        the way) before the first file is written, so a refused run leaves no half record."""
        run_id = uuid7()
        events = self.records / "event" / fanout(run_id)
        for folder in (self._path("run", run_id).parent, events, self.root / RUNS):
            rel = folder.relative_to(self.root)
            try:
                os.close(open_folder(self.root, rel))
            except FileNotFoundError:
                pass  # made below, with no link in the way
        body = spec.to_json() if isinstance(spec, RunSpec) else spec
        write_record(self._path("run", run_id), {"id": run_id, "created": time.time(), **body}, root=self.root)
        self.add_event(run_id, "status", state=RunState.QUEUED)
        self.folder(Path(RUNS) / run_id)
        return run_id

    def add_event(self, run_id: str, kind: str, **data: Any) -> None:
        event_id = uuid7()
        path = self.records / "event" / fanout(run_id) / run_id / f"{event_id}.json"
        data = {k: self._relative_fields(v) if k in PATH_FIELDS or k == "trackers" else v for k, v in data.items()}
        write_record(path, {"id": event_id, "run": run_id, "kind": kind, "time": time.time(), **data}, root=self.root)
        # A new file changes only its own folder's mtime; touching the fan folder too lets the index
        # skip, at a glance, every fan where no run got a new event.
        os.utime(path.parent.parent)

    def events(self, run_id: str) -> list[dict]:
        folder = self.records / "event" / fanout(run_id) / run_id
        if not folder.is_dir():
            return []
        return [read_kind(p, "event") for p in sorted(folder.iterdir()) if not p.name.startswith(".")]

    def run_spec(self, run_id: str) -> RunSpec:
        path = self._path("run", run_id)
        if not path.exists():
            raise NotFound(f"no run {run_id} in {self.root}")
        return RunSpec.from_json(read_kind(path, "run"))

    def run(self, run_id: str) -> RunView:
        """The run's current view, read from its records (the index is not needed); paths it holds
        are where they are in this store."""
        view = fold(run_id, self.run_spec(run_id), self.events(run_id))
        view.trackers = self._absolute_fields(view.trackers)
        view.jobs = [self._absolute_fields(j) for j in view.jobs]
        return view

    def _relative_fields(self, value: Any) -> Any:
        """A path field (or a dict of them) as recorded: relative when it lies in the store."""
        if isinstance(value, dict):
            return {k: self._relative_fields(v) if k in PATH_FIELDS else v for k, v in value.items()}
        if isinstance(value, (str, Path)) and os.path.isabs(value) and self.inside(Path(value)) is not None:
            return self.stored_path(Path(value))
        return value

    def _absolute_fields(self, fields: dict) -> dict:
        return {k: str(self.root / v) if k in PATH_FIELDS and isinstance(v, str) and v and not os.path.isabs(v)
                and ".." not in Path(v).parts else v for k, v in fields.items()}

    # ---- artifacts -----------------------------------------------------------------------
    def register(self, path: Path, *, kind: str, name: str | None = None, run: str | None = None,
                 metadata: dict | None = None, version: bool = True) -> str:
        """Make `path` an immutable artifact in place and return its ID, and a new version of `name`
        (`version=False`: the record says the name, but no version is added and `:latest` stays: a
        reproduction, which checks a run and moves no name).

        Every entry is lstat-ed first and anything but plain files and folders is refused before a
        single mode changes. Then the files are made read-only, hashed, and only then is the record
        renamed into place: a registration killed at any point leaves no record, so nothing
        half-made is ever visible. Content already registered whose recorded copy no longer
        verifies is healed: a location record points the artifact at these new, verified files.
        """
        path = Path(path).absolute()
        try:
            path.lstat()
        except FileNotFoundError:
            raise NotFound(f"cannot register {show_path(path)}: it does not exist") from None
        if name:
            refs.check_name(name)
        rel = self.inside(path)
        if rel is not None and rel.parts[0] in (RECORDS, REFS):
            raise Unsafe(f"cannot register {show_path(path)}: it is the store's own bookkeeping")
        if rel is not None and len(rel.parts) > 1:
            os.close(open_folder(self.root, rel.parent))  # no link between the root and the artifact
        self._refuse_unsafe(path)
        make_read_only(path, share=self.mode, root=self.root if rel is not None else None, rel=rel)
        if rel is not None:
            self._reachable(rel.parent)
        files = self._refuse_unsafe(path)  # again: stats after the chmod, for the stat cache
        cache = self.stat_cache()
        try:
            entries = hashing.manifest(path, cache, files=files)
        except OSError as e:
            raise Unsafe(f"cannot register {show_path(path)}: {e.strerror or e}") from None
        finally:
            cache.close()
        art_id = hashing.artifact_id(entries)
        record = {
            "id": art_id,
            "kind": kind,
            "path": self.stored_path(path),
            "is_dir": path.is_dir(),
            "manifest": entries,
            "size": sum(e["size"] for e in entries),
            "producer": run,
            "name": name,
            "metadata": metadata or {},
            "created": time.time(),
        }
        if not write_record(self._path("artifact", art_id), record, exclusive=True, root=self.root):
            try:
                self.verify(art_id)
            except Corrupt as e:
                self._relocate(art_id, path, run, reason=str(e))
        if name and version:
            refs.add(self.refs, name, art_id, run)
        return art_id

    def _reachable(self, rel: Path) -> None:
        """Give the folders from the root down to an artifact the root's read and search bits, so
        whoever may read the store reaches the artifact whatever the umask of the job that wrote them
        (a folder of another owner is left as it is)."""
        want = self.mode & 0o555
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in rel.parts:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
                mode = stat.S_IMODE(os.fstat(fd).st_mode)
                if mode & want != want:
                    try:
                        os.fchmod(fd, mode | want)
                    except PermissionError:
                        pass
        finally:
            os.close(fd)

    def _refuse_unsafe(self, path: Path) -> list:
        files, problems = hashing.scan(path)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise Unsafe(f"cannot register {show_path(path)}: {problems[0]}{more}; an artifact holds only "
                         "plain files and folders")
        return files

    def _relocate(self, art_id: str, path: Path, run: str | None, reason: str) -> None:
        """Append a location: the artifact's bytes now live at `path` (already hashed to `art_id`)."""
        loc_id = uuid7()
        file = self.records / "location" / fanout(art_id) / art_id / f"{loc_id}.json"
        write_record(file, {"id": loc_id, "artifact": art_id, "path": self.stored_path(path), "is_dir": path.is_dir(),
                            "run": run, "time": time.time(),
                            "healed": reason.replace(f"{self.root}{os.sep}", "")}, root=self.root)
        os.utime(file.parent.parent)  # as in add_event: the index skips fans with no new location

    def remove_artifact_records(self, art_id: str) -> None:
        """Delete the artifact's record and its location records: only gc removes records, and only
        after deciding nothing keeps the artifact (the index is told separately)."""
        if not ART_ID.match(art_id):
            raise LineageError(f"bad artifact ID {art_id!r}: expected art_ and 64 hex digits")
        self._path("artifact", art_id).unlink(missing_ok=True)
        shutil.rmtree(self.records / "location" / fanout(art_id) / art_id, ignore_errors=True)

    def locations(self, art_id: str) -> list[dict]:
        """The artifact's later locations, oldest first (healed copies)."""
        folder = self.records / "location" / fanout(art_id) / art_id
        if not folder.is_dir():
            return []
        found = [read_kind(p, "location") for p in folder.iterdir() if not p.name.startswith(".")]
        return sorted(found, key=lambda r: (r["time"], r["id"]))

    def artifact(self, art_id: str) -> dict:
        """The artifact's record, with `path` at its newest verified location."""
        if not ART_ID.match(art_id):
            raise LineageError(f"bad artifact ID {art_id!r}: expected art_ and 64 hex digits")
        path = self._path("artifact", art_id)
        if not os.path.lexists(path):
            raise NotFound(f"no artifact {art_id} in {self.root} (see `jobs artifacts`)")
        record = read_kind(path, "artifact")
        first = str(self.locate(record["path"], producer=record.get("producer"), art_id=art_id))
        record = {**record, "path": first}
        moved = self.locations(art_id)
        if moved:
            where = self.locate(moved[-1]["path"], producer=moved[-1].get("run"), art_id=art_id)
            record = {**record, "path": str(where), "is_dir": moved[-1].get("is_dir", record.get("is_dir")),
                      "first_path": first}
        return record

    def resolve_artifact(self, text: str) -> str:
        """A full ID, a unique ID prefix (`art_3f9c`), or an alias (`tiny/data/sft:latest`) -> full ID.

        It does not re-hash: use `resolve_verified` where the bytes are about to be used.
        """
        if text.startswith("art_"):
            prefix = text
            if len(prefix) < 8 or len(prefix) > 68 or any(c not in "0123456789abcdef" for c in prefix[4:]):
                raise LineageError(f"bad artifact ID {text!r}: expected art_ and at least 4 hex digits")
            folder = self.records / "artifact" / prefix[4:6]
            hits = sorted(p.stem for p in folder.glob(f"{prefix}*.json")) if folder.is_dir() else []
            if not hits:
                raise NotFound(f"no artifact {text} in {self.root} (see `jobs artifacts`)")
            if len(hits) > 1:
                raise Ambiguous(f"artifact prefix {text} matches {len(hits)} artifacts; give more digits")
            return hits[0]
        if ":" in text:
            return refs.resolve(self.refs, text, passed_over=self._by_reproduction)
        raise LineageError(f"{show_path(text)!r} is neither an artifact ID (art_…) nor an alias (name:latest, name:vN)")

    def _by_reproduction(self, entry: dict) -> bool:
        """Whether a run that reproduces another added this ref version: a reproduction checks a run
        and moves no name (runtime/entry.py adds it no version; earlier code of the project did)."""
        if not entry.get("run"):
            return False
        try:
            return bool(self.run_spec(entry["run"]).reproduces)
        except (LineageError, OSError, ValueError, KeyError, TypeError):
            return False

    def resolve_verified(self, text: str) -> str:
        """`resolve_artifact`, then `verify`: an alias never silently gives an artifact whose files changed."""
        art_id = self.resolve_artifact(text)
        try:
            self.verify(art_id)
        except Corrupt as e:
            raise Corrupt(f"{text} is corrupt: {e}") from None
        return art_id

    def verify(self, art_id: str) -> None:
        """Re-hash the artifact's files; raise Corrupt (one line) naming the folder and the files that differ.

        Unchanged files are taken from the stat cache, keyed on ctime too, so this is cheap to
        call before every use. Nothing but regular files is ever opened.
        """
        record = self.artifact(art_id)
        path = Path(record["path"])
        hint = f"; re-run its producer {record['producer']} to heal it" if record.get("producer") else ""
        try:
            st = path.lstat()
        except FileNotFoundError:
            raise Corrupt(f"{art_id}: its files at {show_path(path)} are gone{hint}") from None
        if bool(record.get("is_dir", True)) != stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            raise Corrupt(f"{art_id}: {show_path(path)} is no longer a {'folder' if record.get('is_dir', True) else 'file'}{hint}")
        files, unsafe = hashing.scan(path)
        cache = self.stat_cache()
        try:
            now = {e["path"]: e for e in hashing.manifest(path, cache, files=files)}
        except OSError as e:
            raise Corrupt(f"{art_id} at {show_path(path)}: cannot read {show_path(e.filename or '')} "
                          f"({e.strerror or e}){hint}") from None
        finally:
            cache.close()
        was = {e["path"]: e for e in record["manifest"]}
        problems = [show_path(u) for u in unsafe]
        problems += [f"missing {show_path(p)}" for p in sorted(was.keys() - now.keys())]
        problems += [f"unexpected {show_path(p)}" for p in sorted(now.keys() - was.keys())]
        problems += [f"changed {show_path(p)}" for p in sorted(was.keys() & now.keys()) if was[p] != now[p]]
        if problems:
            shown = ", ".join(problems[:5]) + (f", … {len(problems) - 5} more" if len(problems) > 5 else "")
            raise Corrupt(f"{art_id} at {show_path(path)}: {shown}{hint}")

    # ---- index ---------------------------------------------------------------------------
    # ---- read straight from the files, no index opened (tab completion) ----------------------
    def record_ids(self, kind: str) -> list[str]:
        """The IDs of one kind of record (`run`, `sweep`), newest first (a UUIDv7 starts with its time)."""
        return sorted((p.stem for p in (self.records / kind).glob("*/*.json")), reverse=True)

    def alias_names(self) -> list[str]:
        """Every alias name: each folder under refs/ that holds a version of it."""
        names = []
        for folder, _, files in os.walk(self.refs):
            if any(refs.VERSION_FILE.match(f) for f in files):
                names.append(Path(folder).relative_to(self.refs).as_posix())
        return sorted(names)

    # ---- what `jobs add` brings in: the store names the copy's folder, hashes it and names the artifact
    def check_alias(self, name: str) -> None:
        """Refuse a name an alias cannot have, or whose folders under refs/ are not plain folders;
        reads only (a store not made yet has no folders to refuse)."""
        refs.check_name(name)
        if (self.root / MARKER).exists():
            refs.check_folders(self.refs, name)

    def import_folder(self, name: str) -> Path:
        """A new folder, not made yet, for `jobs add` to copy the user's `name` into (under imports/)."""
        return import_path(self.root, uuid7(), name)

    @staticmethod
    def copy_hashed(src, dest: Path, st: os.stat_result) -> dict:
        """Copy the open regular file `src` (whose stat is `st`) to the new file `dest`, hashing as it
        goes: its manifest entry, path left to the caller, as `register` would hash it."""
        return hashing.copy_file(src, dest, st)

    @staticmethod
    def artifact_id(entries: list[dict]) -> str:
        """The ID the store gives an artifact of these manifest entries (its bytes, modes and paths)."""
        return hashing.artifact_id(entries)

    def alias(self, name: str, art_id: str, reuse: bool = True) -> tuple[int, bool]:
        """Name `art_id` `name`: (the version that holds it, whether this call made that version).
        With `reuse`, a version that already holds the artifact is kept and none is added."""
        held = refs.holding_version(self.refs, name, art_id) if reuse else None
        if held is not None:
            return held, False
        return refs.add(self.refs, name, art_id, None), True

    def index(self):
        from lineage.index import Index

        idx = Index(self)
        idx.sync()
        return idx


def share_modes(share: int) -> tuple[int, int, int]:
    """(file, executable file, folder) modes of a registered artifact in a store whose root folder
    has mode `share`: read-only, and readable (folders searchable) by exactly the classes that may
    read the root. A team store's root is `chgrp TEAM` and `chmod 2770`: artifacts become 0440 /
    0550, read by everyone in the group, weights included; a private store's 0755 root gives 0444."""
    read = (share & 0o444) | 0o400
    search = ((share & 0o111) | 0o100) & (read >> 2)
    return read, read | search, read | search


def make_read_only(path: Path, share: int = 0o755, root: Path | None = None, rel: Path | None = None) -> None:
    """Give every entry below `path` its read-only mode (`share_modes`), files first, then folders bottom-up.

    Each entry is opened relative to its folder's descriptor without following links, and its
    mode changed through that descriptor: a link or FIFO swapped in after the check is refused,
    never followed, so nothing outside `path` can change mode. With `root`, `path` is `root/rel`,
    and the folder holding it is reached from `root` the same way.
    """
    file_mode, exec_mode, dir_mode = share_modes(share)

    def entry(name, dir_fd: int | None, shown: Path) -> None:
        try:
            visit(name, dir_fd, shown)
        except OSError as e:
            raise Unsafe(f"cannot make {show_path(shown)} read-only: {e.strerror or e}") from None

    def visit(name, dir_fd: int | None, shown: Path) -> None:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                for child in sorted(os.listdir(fd)):
                    entry(child, fd, shown / child)
                if stat.S_IMODE(os.fstat(fd).st_mode) != dir_mode:
                    os.fchmod(fd, dir_mode)
            finally:
                os.close(fd)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            try:
                now = os.fstat(fd)
                if not stat.S_ISREG(now.st_mode):
                    raise Unsafe(f"cannot register: {show_path(shown)} changed while it was registered")
                want = exec_mode if now.st_mode & stat.S_IXUSR else file_mode
                if stat.S_IMODE(now.st_mode) != want:
                    os.fchmod(fd, want)
            finally:
                os.close(fd)
        else:
            raise Unsafe(f"cannot register: {show_path(shown)} is not a plain file or folder")

    if root is None:
        entry(str(path), None, path)
        return
    parent = open_folder(root, rel.parent)
    try:
        entry(rel.name, parent, path)
    finally:
        os.close(parent)
