"""A SQLite index over the record files, for listing and lineage queries.

It is never the truth: `rebuild()` throws it away (a garbage file included) and reads every record
again, and `sync()` reads only the record folders whose mtime changed since the last sync (and a
known name's new versions by probing, never by listing its folder). Record writers never touch it;
readers update it, and gc removes what it collected, only through these methods and under a file
lock. It lives in this host's cache folder (see lineage.store.cache_dir), never in the shared store,
so SQLite never locks over NFS and read commands work on a read-only store; where no cache folder
can be made it is built in memory.
A folder modified in the last two seconds is not marked clean, so a record landing in the same
mtime tick is not missed.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lineage import refs
from lineage.errors import Ambiguous, Damaged, LineageError, NotFound, show_path
from lineage.records import read_kind, strict_json
from lineage.states import RunState

RUN_PREFIX = re.compile(r"^[0-9a-f-]{1,36}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, recipe TEXT, stage TEXT, created REAL,
    executor TEXT, state TEXT, state_time REAL, state_event TEXT, run_key TEXT);
CREATE INDEX IF NOT EXISTS runs_key ON runs (run_key);
CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, run TEXT, kind TEXT, time REAL, body TEXT);
CREATE INDEX IF NOT EXISTS events_run ON events (run);
CREATE TABLE IF NOT EXISTS artifacts (id TEXT PRIMARY KEY, kind TEXT, name TEXT, path TEXT,
    size INTEGER, producer TEXT, created REAL);
CREATE TABLE IF NOT EXISTS edges (run TEXT, artifact TEXT, role TEXT, direction TEXT,
    PRIMARY KEY (run, artifact, role, direction));
DROP INDEX IF EXISTS edges_artifact;
CREATE INDEX IF NOT EXISTS edges_artifact_direction ON edges (artifact, direction);
CREATE TABLE IF NOT EXISTS refs (name TEXT, version INTEGER, artifact TEXT, run TEXT, time REAL,
    PRIMARY KEY (name, version));
CREATE INDEX IF NOT EXISTS refs_artifact ON refs (artifact);
CREATE TABLE IF NOT EXISTS locations (id TEXT PRIMARY KEY, artifact TEXT, path TEXT, time REAL);
CREATE INDEX IF NOT EXISTS locations_artifact ON locations (artifact);
CREATE TABLE IF NOT EXISTS folders (path TEXT PRIMARY KEY, mtime_ns INTEGER);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""
SETTLE_NS = 2_000_000_000
# Bump when a table changes: an index of another version is rebuilt. An index changes in place
# (SCHEMA runs at every sync), e.g. edges by (artifact, direction): a shared data artifact's 100k
# consumers made each look-up of its producer scan them all.
# 5: artifact and location paths are where the files are in this store (records hold them relative).
VERSION = 5
TABLES = ("runs", "events", "artifacts", "edges", "refs", "locations", "folders", "meta")
# The newest location of an artifact: where its (healed) files are now.
ART_PATH = ("COALESCE((SELECT l.path FROM locations l WHERE l.artifact = artifacts.id"
            " ORDER BY l.time DESC, l.id DESC LIMIT 1), artifacts.path)")


class Index:
    def __init__(self, store):
        self.store = store
        folder = store.cache
        try:
            folder.mkdir(parents=True, exist_ok=True)
            ok = os.access(folder, os.W_OK)
        except OSError:
            ok = False
        self.path = folder / "index.sqlite" if ok else None
        self.damaged: str | None = None
        self._connect()

    def _connect(self) -> None:
        self.db = sqlite3.connect(self.path or ":memory:", timeout=60)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA user_version").fetchone()
            self.damaged = None
        except sqlite3.DatabaseError as e:
            self.damaged = f"damaged index {show_path(self.path)}: {e} (it is only a cache: run `jobs index --rebuild`)"

    # ---- keeping it current --------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None:  # in memory: this process is its only user
            yield
            return
        with open(self.path.with_name("index.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def rebuild(self) -> None:
        """Read every record again; a garbage index file is replaced by a new one."""
        with self._locked():
            if self.damaged:
                self.db.close()
                for suffix in ("", "-journal", "-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                self._connect()
            self._drop()
            self.db.execute(f"PRAGMA user_version = {VERSION}")
            self._sync_locked()

    def _drop(self) -> None:
        self.db.executescript("".join(f"DROP TABLE IF EXISTS {t};" for t in TABLES))

    def sync(self) -> None:
        if self.damaged:
            raise Damaged(self.damaged)
        try:
            with self._locked():
                if self.db.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                    self._drop()
                    self.db.execute(f"PRAGMA user_version = {VERSION}")
                self._sync_locked()
        except sqlite3.DatabaseError as e:
            raise Damaged(f"damaged index {show_path(self.path)}: {e} (it is only a cache: run `jobs index --rebuild`)") from None

    def _sync_locked(self) -> None:
        self.db.executescript(SCHEMA)
        self._same_store()
        def known_mtime(key: str) -> int | None:
            # One lookup per folder visited: a big store has a folder per run, far more than a sync visits.
            row = self.db.execute("SELECT mtime_ns FROM folders WHERE path=?", (key,)).fetchone()
            return row[0] if row else None

        changed: dict[str, int] = {}
        now = time.time_ns()
        writes = []

        root_len = len(str(self.store.root)) + 1

        def unchanged(folder: str, st: os.stat_result) -> bool:
            key = folder[root_len:]
            if known_mtime(key) == st.st_mtime_ns:
                return True
            changed[key] = st.st_mtime_ns if now - st.st_mtime_ns > SETTLE_NS else 0
            return False

        def scan(folder: str, leaf_depth: int, handle, guarded: int = -1) -> None:
            """Walk `folder`; record files sit `leaf_depth` folders down.

            A folder at depth `guarded` is skipped when its mtime is unchanged: writers touch it
            whenever they add a record anywhere below it (see Store.add_event).
            """
            try:
                st = os.stat(folder)
            except FileNotFoundError:
                return
            if leaf_depth == 0:
                if unchanged(folder, st):
                    return
                for entry in os.scandir(folder):
                    if entry.name.endswith(".json") and not entry.name.startswith("."):
                        writes.append((handle, Path(entry.path)))
                return
            if guarded == 0 and unchanged(folder, st):
                return
            for entry in os.scandir(folder):
                if entry.is_dir() and not entry.name.startswith("."):
                    scan(entry.path, leaf_depth - 1, handle, guarded - 1)

        records = str(self.store.records)
        scan(os.path.join(records, "run"), 1, self._add_run)
        scan(os.path.join(records, "artifact"), 1, self._add_artifact)
        scan(os.path.join(records, "event"), 2, self._add_event, guarded=1)
        scan(os.path.join(records, "location"), 2, self._add_location, guarded=1)
        refs_root = str(self.store.refs)
        if os.path.isdir(refs_root) and not unchanged(refs_root, os.stat(refs_root)):
            self._scan_refs(lambda folder: scan(folder, 0, self._add_ref), unchanged, writes)
        if not writes and not changed:
            return
        with self.db:
            for handle, path in writes:
                handle(path)
            self.db.executemany("INSERT OR REPLACE INTO folders VALUES (?, ?)", changed.items())

    def _same_store(self) -> None:
        """The cache is keyed by the store's path. A store deleted and made again at that path has a
        new marker (its creation time): the rows of the old one's runs are dropped, not served.
        An index from before this check adopts the marker it first sees."""
        try:
            marker = (self.store.root / "jobs-store.json").read_bytes()
        except OSError:
            return  # a bare Store() in a test, or a store being created: nothing to compare
        row = self.db.execute("SELECT value FROM meta WHERE key='marker'").fetchone()
        if row is not None and row[0] == marker.decode(errors="replace"):
            return
        if row is not None:
            self._drop()
            self.db.executescript(SCHEMA)
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('marker', ?)", (marker.decode(errors="replace"),))

    def _scan_refs(self, listed, unchanged, writes: list) -> None:
        """New ref versions, without listing a big name's folder (100k entries, seconds on Lustre).

        A name the index knows is probed forward from its highest indexed version (writers take
        numbers without gaps, see lineage.refs). A folder is listed only when the index knows no
        versions in it (its first sync, a rebuild) or when its link count says it holds a subfolder
        the index does not know (a new name below it).
        """
        top = dict(self.db.execute("SELECT name, max(version) FROM refs GROUP BY name").fetchall())
        children: dict[str, set[str]] = {}
        for name in top:
            parts = name.split("/")
            for k in range(len(parts)):
                children.setdefault("/".join(parts[:k]), set()).add(parts[k])
        root = str(self.store.refs)
        stack = [""]
        while stack:
            rel = stack.pop()
            folder = os.path.join(root, rel) if rel else root
            try:
                st = os.lstat(folder)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue  # a link planted as a refs folder is never followed
            if rel and rel in top:
                if not unchanged(folder, st):
                    v = top[rel] + 1
                    while os.path.lexists(path := refs.version_path(Path(folder), v)):
                        writes.append((self._add_ref, path))
                        v += 1
            elif rel:
                listed(folder)
            known = [c for c in children.get(rel, ()) if os.path.isdir(os.path.join(folder, c))
                     and not os.path.islink(os.path.join(folder, c))]
            if st.st_nlink - 2 == len(known):  # a folder's link count is 2 + its subfolders
                subs = known
            else:  # a new subfolder, or a filesystem that does not count them (nlink 1)
                with os.scandir(folder) as it:
                    subs = [e.name for e in it if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
            stack += [f"{rel}/{c}" if rel else c for c in subs if refs.NAME.match(f"{rel}/{c}" if rel else c)]

    def _exists(self, table: str, where: str, args: tuple) -> bool:
        return self.db.execute(f"SELECT 1 FROM {table} WHERE {where}", args).fetchone() is not None

    def _add_run(self, path: Path) -> None:
        if self._exists("runs", "id=?", (path.stem,)):
            return
        r = read_kind(path, "run")
        self.db.execute(
            "INSERT INTO runs (id, recipe, stage, created, executor, state, state_time, state_event, run_key)"
            " VALUES (?, ?, ?, ?, ?, NULL, 0, '', ?)",
            (r["id"], r["recipe"], r["stage"], r["created"], r.get("executor"), r.get("run_key")),
        )
        self._add_edges(r["id"], r.get("inputs", {}), "in")
        # Events may have been indexed before their run record: take their latest status and key.
        keyed = self.db.execute("SELECT body FROM events WHERE run=? AND kind='inputs'", (r["id"],)).fetchall()
        for (body,) in keyed:
            if json.loads(body).get("run_key"):
                self.db.execute("UPDATE runs SET run_key=? WHERE id=?", (json.loads(body)["run_key"], r["id"]))
        row = self.db.execute(
            "SELECT id, time, body FROM events WHERE run=? AND kind='status' ORDER BY time DESC, id DESC LIMIT 1",
            (r["id"],),
        ).fetchone()
        if row:
            self._set_state(r["id"], json.loads(row["body"])["state"], row["time"], row["id"])

    def _add_edges(self, run: str, mapping: dict, direction: str) -> None:
        self.db.executemany(
            "INSERT OR IGNORE INTO edges VALUES (?, ?, ?, ?)",
            [(run, art, role, direction) for role, art in mapping.items() if isinstance(art, str)],
        )

    def _set_state(self, run: str, state: str, when: float, event: str) -> None:
        self.db.execute(
            "UPDATE runs SET state=?, state_time=?, state_event=? WHERE id=? AND (state_time < ? OR"
            " (state_time = ? AND state_event < ?))",
            (state, when, event, run, when, when, event),
        )

    def _add_event(self, path: Path) -> None:
        if self._exists("events", "id=?", (path.stem,)):
            return
        ev = read_kind(path, "event")
        self.db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                        (ev["id"], ev["run"], ev["kind"], ev["time"], strict_json(ev)))
        if ev["kind"] == "status":
            self._set_state(ev["run"], ev["state"], ev["time"], ev["id"])
        elif ev["kind"] == "inputs":
            self._add_edges(ev["run"], ev["inputs"], "in")
            if ev.get("run_key"):
                self.db.execute("UPDATE runs SET run_key=? WHERE id=?", (ev["run_key"], ev["run"]))
        elif ev["kind"] == "outputs":
            self._add_edges(ev["run"], ev["outputs"], "out")

    def _add_artifact(self, path: Path) -> None:
        if self._exists("artifacts", "id=?", (path.stem,)):
            return
        a = read_kind(path, "artifact")
        self.db.execute("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (a["id"], a["kind"], a.get("name"),
                         str(self.store.locate(a["path"], producer=a.get("producer"), art_id=a["id"])),
                         a["size"], a.get("producer"), a["created"]))

    def _add_location(self, path: Path) -> None:
        if self._exists("locations", "id=?", (path.stem,)):
            return
        loc = read_kind(path, "location")
        where = self.store.locate(loc["path"], producer=loc.get("run"), art_id=loc["artifact"])
        self.db.execute("INSERT INTO locations VALUES (?, ?, ?, ?)", (loc["id"], loc["artifact"], str(where), loc["time"]))

    def _add_ref(self, path: Path) -> None:
        name = path.parent.relative_to(self.store.refs).as_posix()
        m = refs.VERSION_FILE.match(path.name)
        if not m or not refs.NAME.match(name):
            return  # not a ref version file: nothing resolves to it, so nothing indexes it
        version = int(m[1])
        if self._exists("refs", "name=? AND version=?", (name, version)):
            return
        r = refs.read(path)
        self.db.execute("INSERT INTO refs VALUES (?, ?, ?, ?, ?)", (name, version, r["artifact"], r.get("run"), r["time"]))

    # ---- queries -------------------------------------------------------------------------
    def runs(self, recipe: str | None = None, stage: str | None = None, limit: int | None = None,
             failure_class: str | None = None) -> list[sqlite3.Row]:
        """Runs newest first; `failure_class`: only FAILED runs whose failure (the status event that
        set the state) is of that class (lineage/failures.py)."""
        sql, args = "SELECT r.* FROM runs r WHERE 1=1", []
        if failure_class:
            sql = ("SELECT r.* FROM runs r JOIN events e ON e.id = r.state_event WHERE r.state = ?"
                   " AND json_extract(e.body, '$.failure_class') = ?")
            args = [RunState.FAILED.value, failure_class]
        if recipe:
            sql, args = sql + " AND r.recipe=?", args + [recipe]
        if stage:
            sql, args = sql + " AND r.stage=?", args + [stage]
        sql += " ORDER BY r.id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self.db.execute(sql, args).fetchall()

    def resolve_run(self, prefix: str) -> str:
        """A run ID, or a unique prefix of one (hex digits and dashes only: no wildcard reaches SQL)."""
        if not RUN_PREFIX.match(prefix):
            raise LineageError(f"bad run ID {show_path(prefix)!r}: give a run ID or its first characters "
                               "(hex digits and '-', see `jobs list`)")
        if self.db.execute("SELECT 1 FROM runs WHERE id=?", (prefix,)).fetchone():
            return prefix
        hits = [r[0] for r in self.db.execute(
            "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 2", (len(prefix), prefix))]
        if not hits:
            raise NotFound(f"no run {prefix} in {self.store.root} (see `jobs list`)")
        if len(hits) > 1:
            raise Ambiguous(f"run prefix {prefix} matches several runs; give more characters")
        return hits[0]

    def artifacts(self, recipe: str | None = None, kind: str | None = None) -> list[sqlite3.Row]:
        sql, args = f"SELECT id, kind, name, {ART_PATH} AS path, size, producer, created FROM artifacts WHERE 1=1", []
        if kind:
            sql, args = sql + " AND kind=?", args + [kind]
        if recipe:
            sql, args = (sql + " AND (substr(name, 1, ?) = ? OR producer IN (SELECT id FROM runs WHERE recipe=?))",
                         args + [len(recipe) + 1, recipe + "/", recipe])
        return self.db.execute(sql + " ORDER BY created DESC", args).fetchall()

    def names_of(self, artifact: str) -> list[str]:
        return [f"{r[0]}:v{r[1]}" for r in self.db.execute(
            "SELECT name, version FROM refs WHERE artifact=? ORDER BY name, version", (artifact,))]

    def refs_of(self, artifact: str) -> list[sqlite3.Row]:
        """The names and versions that point at `artifact`, oldest first."""
        return self.db.execute("SELECT name, version, run, time FROM refs WHERE artifact=? ORDER BY time, name, version",
                               (artifact,)).fetchall()

    def producer(self, artifact: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT run, role FROM edges WHERE artifact=? AND direction='out'", (artifact,)).fetchall()

    def consumers(self, artifact: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT run, role FROM edges WHERE artifact=? AND direction='in'", (artifact,)).fetchall()

    def edges_of(self, run: str, direction: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT artifact, role FROM edges WHERE run=? AND direction=? ORDER BY role",
                               (run, direction)).fetchall()

    def runs_with_key(self, run_key: str) -> list[str]:
        """SUCCEEDED runs that computed `run_key`, newest first."""
        return [r[0] for r in self.db.execute(
            "SELECT id FROM runs WHERE run_key=? AND state='SUCCEEDED' ORDER BY id DESC", (run_key,))]

    def run_row(self, run: str) -> sqlite3.Row | None:
        return self.db.execute("SELECT * FROM runs WHERE id=?", (run,)).fetchone()

    # ---- what gc needs --------------------------------------------------------------------
    def named(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT name FROM refs ORDER BY name")]

    def edges(self, direction: str) -> list[tuple[str, str]]:
        """(run, artifact) for every input ("in") or output ("out") edge."""
        return [tuple(r) for r in self.db.execute("SELECT run, artifact FROM edges WHERE direction=?", (direction,))]

    def pinned_runs(self) -> set[str]:
        """Runs whose latest pin event pins them."""
        latest: dict[str, bool] = {}
        for run, body in self.db.execute("SELECT run, body FROM events WHERE kind='pin' ORDER BY time, id"):
            latest[run] = json.loads(body)["pinned"]
        return {r for r, p in latest.items() if p}

    def forget_artifact(self, art_id: str) -> None:
        with self._locked(), self.db:
            self.db.execute("DELETE FROM artifacts WHERE id=?", (art_id,))
            self.db.execute("DELETE FROM locations WHERE artifact=?", (art_id,))

    def shares_path(self, art_id: str, path: str) -> bool:
        """Another artifact's files are at `path` too."""
        return self.db.execute(f"SELECT count(*) FROM artifacts WHERE {ART_PATH} = ? AND id != ?",
                               (path, art_id)).fetchone()[0] > 0

    def dump(self) -> dict[str, list[tuple]]:
        """Every row of every table but `folders`, sorted: two indexes of one store compare equal."""
        tables = ["runs", "events", "artifacts", "edges", "refs", "locations"]
        return {t: sorted(tuple(r) for r in self.db.execute(f"SELECT * FROM {t}")) for t in tables}
