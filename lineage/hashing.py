"""Content hashing: a digest type that carries its algorithm, directory manifests, and a stat cache.

A manifest lists every file of a directory as (path, size, digest, mode), sorted by path. The
artifact ID is the SHA-256 of that manifest's canonical JSON, so identical content has one ID
wherever it lives. Files are hashed in parallel threads (hashlib releases the GIL on large
buffers), and a stat cache keyed by (device, inode, size, mtime, ctime) skips files that did not change.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from lineage.records import canonical_json

ALGORITHM = "sha256"
# Small enough to stay in a core's L2 cache between the copy out of the page cache and the hashing:
# registering 2 GiB on the 2-core dev machine took 7% less time with 1 MiB reads than with 4 MiB
# (median of 8, interleaved), and 16 MiB reads hash a third slower than 1 MiB ones.
CHUNK = 1 << 20


def usable_cpus() -> int:
    """Cores this process may run on: a Slurm allocation pins it to fewer than the node has."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Digest:
    algorithm: str
    value: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.value}"

    @classmethod
    def parse(cls, text: str) -> "Digest":
        algorithm, _, value = text.partition(":")
        if not value:
            raise ValueError(f"digest without algorithm: {text!r}")
        return cls(algorithm, value)


def hash_bytes(data: bytes) -> Digest:
    return Digest(ALGORITHM, hashlib.sha256(data).hexdigest())


def hash_json(obj) -> Digest:
    """The digest of data (a manifest, a run spec, a config): SHA-256 of its canonical JSON."""
    return hash_bytes(canonical_json(obj))


def hash_file(path: Path) -> Digest:
    """SHA-256 of a regular file. Opened without following a link and without blocking, so a FIFO
    or link swapped in after the walk is refused instead of hanging or reading outside."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, f"{path} is no longer a regular file")
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return Digest(ALGORITHM, h.hexdigest())


def normal_mode(st_mode: int) -> int:
    """Only the executable bit matters: making an artifact read-only must not change its ID."""
    return 0o755 if st_mode & stat.S_IXUSR else 0o644


class StatCache:
    """(device, inode, size, mtime_ns, ctime_ns) -> digest, in a small SQLite file in the per-host cache.

    The ctime is in the key because no user can set it back: an edit that keeps the size and restores
    the mtime (`touch -d`) still moves the ctime, so it is re-hashed. It is a cache, never the truth:
    a missing, unwritable or garbage cache file only costs re-reading files.
    """

    def __init__(self, path: Path | None):
        self._db = None
        if path is not None:
            for attempt in range(2):
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._db = sqlite3.connect(path, timeout=60, check_same_thread=False)
                    self._db.execute(
                        "CREATE TABLE IF NOT EXISTS files (dev INTEGER, ino INTEGER, size INTEGER,"
                        " mtime_ns INTEGER, ctime_ns INTEGER, digest TEXT, PRIMARY KEY (dev, ino))")
                    break
                except sqlite3.DatabaseError:  # garbage in the file: it is only a cache, start over
                    self.close()
                    if attempt == 0:
                        path.unlink(missing_ok=True)
                except OSError:
                    self.close()
                    break

    def get(self, st: os.stat_result) -> str | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT digest FROM files WHERE dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?",
                (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
            ).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def put_many(self, rows: list[tuple[os.stat_result, str]]) -> None:
        if self._db is None or not rows:
            return
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)",
                    [(s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns, d) for s, d in rows],
                )
        except sqlite3.Error:  # read-only or full cache folder: the digests are simply not remembered
            pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def scan(root: Path) -> tuple[list[tuple[str, Path, os.stat_result]], list[str]]:
    """Every regular file under `root` as (relative path, path, lstat), and what is not allowed.

    Nothing is followed or opened: each entry is lstat-ed, so a symbolic link (to a file or a
    folder), a FIFO, a socket or a device is reported, never read, and a hard link whose other name
    lies outside `root` is reported when making it read-only would change that outside file too.
    """
    from lineage.errors import show_path

    files: list[tuple[str, Path, os.stat_result]] = []
    problems: list[str] = []

    def special(p: Path, st: os.stat_result) -> str:
        kind = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "not a regular file")
        return f"{show_path(p)} is {kind}"

    st = root.lstat()
    if stat.S_ISREG(st.st_mode):
        files.append((root.name, root, st))
    elif not stat.S_ISDIR(st.st_mode):
        problems.append(special(root, st))
    else:
        stack = [root]
        while stack:
            folder = stack.pop()
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                full = Path(entry.path)
                est = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(est.st_mode):
                    stack.append(full)
                elif stat.S_ISREG(est.st_mode):
                    files.append((full.relative_to(root).as_posix(), full, est))
                else:
                    problems.append(special(full, est))
    names: dict[tuple[int, int], int] = {}
    for _, _, fst in files:
        names[(fst.st_dev, fst.st_ino)] = names.get((fst.st_dev, fst.st_ino), 0) + 1
    for _, full, fst in files:
        writable = fst.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        if writable and fst.st_nlink > names[(fst.st_dev, fst.st_ino)]:
            problems.append(f"{show_path(full)} is a hard link to a file outside it (making it read-only "
                            "would change that file too; copy it instead)")
    return files, problems


def manifest(root: Path, cache: StatCache | None = None, workers: int | None = None,
             files: list[tuple[str, Path, os.stat_result]] | None = None) -> list[dict]:
    """The sorted manifest of every file under `root` (a single file is its own one-entry manifest).

    Refuses (ValueError) anything `scan` reports; pass `files` from an earlier scan to skip the walk.
    """
    if files is None:
        files, problems = scan(root)
        if problems:
            raise ValueError(problems[0])
    cache = cache or StatCache(None)
    digests: dict[str, str] = {}
    todo = []
    for rel, full, st in files:
        cached = cache.get(st)
        if cached:
            digests[rel] = cached
        else:
            todo.append((rel, full, st))
    from concurrent.futures import ThreadPoolExecutor

    # Big files first so the pool does not end on one long tail. One thread per usable core:
    # hashlib releases the GIL while it hashes, so the threads hash on all cores at once.
    todo.sort(key=lambda t: -t[2].st_size)
    if len(todo) > 1:
        with ThreadPoolExecutor(max_workers=workers or usable_cpus()) as pool:
            fresh = list(pool.map(lambda t: str(hash_file(t[1])), todo))
    else:  # one file hashes on one thread either way; starting a pool for it costs ~1 ms per register
        fresh = [str(hash_file(t[1])) for t in todo]
    for (rel, _, _), d in zip(todo, fresh):
        digests[rel] = d
    cache.put_many([(st, d) for (_, _, st), d in zip(todo, fresh)])
    return [
        {"path": rel, "size": st.st_size, "digest": digests[rel], "mode": normal_mode(st.st_mode)}
        for rel, _, st in sorted(files, key=lambda t: t[0])
    ]


def copy_file(src, dest: Path, st: os.stat_result) -> dict:
    """Copy the open regular file `src` to the new file `dest` (its mode kept, plus owner read and
    write; its times kept), hashing the bytes as they pass: {size, digest, mode}, as `manifest`
    gives them."""
    h = hashlib.sha256()
    size = 0
    with open(dest, "xb") as out:
        while chunk := src.read(CHUNK):
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
        os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode) | stat.S_IRUSR | stat.S_IWUSR)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    return {"size": size, "digest": f"{ALGORITHM}:{h.hexdigest()}", "mode": normal_mode(st.st_mode)}


def artifact_id(entries: list[dict]) -> str:
    return "art_" + hash_json(entries).value
