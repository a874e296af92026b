"""Canonical JSON and the one atomic-write helper every record, manifest and checkpoint goes through."""
from __future__ import annotations

import errno
import json
import math
import os
import secrets
import stat
from pathlib import Path
from typing import Any


def finite(obj: Any) -> Any:
    """`obj` with every float that is not finite (NaN, ±inf: a loss that overflowed) as None. JSON has
    no such numbers: Python writes `NaN` and `Infinity`, which a strict reader (jq, a browser, another
    language) refuses, so every JSON the project writes or prints goes through `strict_json`."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def strict_json(obj: Any, **kw: Any) -> str:
    """`json.dumps` of `finite(obj)`, refusing any non-finite number left (one inside an object that
    `default=` turns into JSON); the text is the same as json.dumps' when every number is finite."""
    return json.dumps(finite(obj), allow_nan=False, **kw)


def canonical_json(obj: Any) -> bytes:
    """Bytes that are identical for equal data: sorted keys, no spaces, UTF-8, strict (`strict_json`)."""
    return strict_json(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def folder_mode(parent_mode: int) -> int:
    """A new folder's permission bits: its parent's (setgid included), plus the sticky bit where
    others may write it (a team store): a member can add entries but never remove or rename another
    member's records, names or runs."""
    mode = stat.S_IMODE(parent_mode) & 0o3777
    return mode | stat.S_ISVTX if mode & 0o022 else mode


def open_regular(path: Path):
    """`path` opened for reading if it is a regular file, else None: a FIFO, device or symbolic link
    planted in a run folder is never followed and never blocks the reader (O_NONBLOCK, then fstat).
    FileNotFoundError when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError:
        return None   # a link (ELOOP), or nothing we may read
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return open(fd, "rb")


def open_folder(root: Path, rel: Path | str, *, create: bool = False) -> int:
    """A descriptor of the folder `root/rel`, reached one name at a time from `root` without ever
    following a symbolic link: a link (or a file) planted anywhere below `root` is Unsafe, so a write
    through this descriptor cannot land outside `root`. With `create`, missing folders are made, each
    with its parent's permission bits (`folder_mode`), whatever the umask. The caller closes it.
    """
    from lineage.errors import Unsafe, show_path

    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    here = Path(root)
    try:
        for name in Path(rel).parts:
            if name in ("", ".", "..") or "/" in name:
                raise Unsafe(f"{show_path(here / name)}: not a plain folder name inside the store")
            here = here / name
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    made = True
                except FileExistsError:  # another writer made it first: open theirs, below
                    made = False
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                if made:
                    os.fchmod(child, folder_mode(os.fstat(fd).st_mode))
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    kind = "a symbolic link" if os.path.islink(here) else "not a folder"
                    raise Unsafe(f"{show_path(here)} is {kind}; the store never writes through one "
                                 "(move it away)") from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def make_folders(folder: Path) -> None:
    """`mkdir -p`, each new folder with its parent's permission bits (as `open_folder` makes them), so
    folders made in a team store are the team's whatever the umask."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for f in reversed(missing):
        try:
            os.mkdir(f, 0o700)
        except FileExistsError:
            continue
        fd = os.open(f, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, folder_mode(os.stat(f.parent).st_mode))
        finally:
            os.close(fd)


def atomic_write(path: Path, data: bytes, *, exclusive: bool = False, mode: int | None = None,
                 root: Path | None = None) -> bool:
    """Write `data` to `path` through a temp file in the same directory, then rename.

    Readers see either no file or the whole file, on local disks and on NFS/Lustre alike. With
    `exclusive`, an existing file is never replaced (hard link instead of rename) and False is
    returned when someone else got there first. `mode` sets the file's permission bits (a temp
    file is made 0600); a callable gets the folder's mode and returns the file's. With `root` (a store),
    the folders from `root` down to `path` are reached and made without following any link
    (`open_folder`); without it they are made as `mkdir -p` would, with their parent's mode.
    """
    path = Path(path)
    if root is None:
        make_folders(path.parent)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    else:
        dir_fd = open_folder(root, path.parent.relative_to(root), create=True)
    tmp = f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                if callable(mode):
                    os.fchmod(f.fileno(), mode(stat.S_IMODE(os.fstat(dir_fd).st_mode)))
                elif mode is not None:
                    os.fchmod(f.fileno(), mode)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if exclusive:
                try:
                    os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    return False
                return True
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return True
        finally:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(dir_fd)


def record_mode(folder_mode: int) -> int:
    """A record is read-only, readable by whoever may list its folder (the store's group on a team store)."""
    return (folder_mode & 0o444) | 0o400


def member_mode(folder_mode: int) -> int:
    """A file its writer rewrites or appends to and the store's members read (a run's progress.json
    and metrics.jsonl): the writer's read and write bits, and its folder's read bits, whatever the
    writer's umask, so a member of a team store sees a running job's step, total and ETA."""
    return (folder_mode & 0o444) | 0o600


def write_record(path: Path, obj: Any, *, exclusive: bool = True, root: Path | None = None) -> bool:
    return atomic_write(path, canonical_json(obj) + b"\n", exclusive=exclusive, mode=record_mode, root=root)


def read_bytes_safely(path: Path) -> bytes:
    """A regular file's bytes; a FIFO, device or link planted in its place is refused, never opened
    in a way that could block."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_record(path: Path, keys: tuple[str, ...] = ()) -> Any:
    """The JSON object in `path`, which must hold `keys`; anything else is Damaged, naming the file.

    A truncated, garbage or wrongly shaped record must be a one-line diagnosis, never a traceback.
    """
    from lineage.errors import Damaged, NotFound, show_path

    try:
        data = read_bytes_safely(Path(path))
    except FileNotFoundError:
        raise NotFound(f"record {show_path(path)} is gone") from None
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or "unreadable")
        raise Damaged(f"damaged store file {show_path(path)}: {why}") from None
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        what = "empty" if not data.strip() else "truncated" if data.lstrip()[:1] in (b"{", b"[") else "not JSON"
        raise Damaged(f"damaged store file {show_path(path)}: {what} ({len(data)} bytes); "
                      "restore it from a backup or move it aside, then `jobs index --rebuild`") from None
    if not isinstance(obj, dict) or any(k not in obj for k in keys):
        missing = [k for k in keys if not isinstance(obj, dict) or k not in obj]
        raise Damaged(f"damaged store file {show_path(path)}: not a record of the expected shape"
                      + (f" (missing {', '.join(missing)})" if missing else ""))
    return obj


NUMBER = (int, float)
# What each kind of record must hold, so a wrongly shaped file is a diagnosis where it is read,
# not a KeyError three calls later.
SHAPES: dict[str, dict[str, Any]] = {
    "run": {"id": str, "recipe": str, "stage": str, "created": NUMBER},
    "event": {"id": str, "run": str, "kind": str, "time": NUMBER},
    "artifact": {"id": str, "kind": str, "path": str, "manifest": list, "size": int, "created": NUMBER},
    "ref": {"artifact": str, "time": NUMBER},
    "location": {"id": str, "artifact": str, "path": str, "time": NUMBER},
}
EVENT_SHAPES: dict[str, dict[str, Any]] = {
    "status": {"state": str}, "attempt": {"attempt": int}, "inputs": {"inputs": dict},
    "outputs": {"outputs": dict}, "metrics": {"metrics": dict}, "tracker": {"trackers": dict},
    "pin": {"pinned": bool}, "job": {},
}
MANIFEST_ENTRY = {"path": str, "size": int, "digest": str, "mode": int}


def read_kind(path: Path, kind: str) -> dict:
    """A record of `kind` ("run", "event", "artifact", "ref", "location"), checked for its shape."""
    from lineage.errors import Damaged, show_path

    obj = read_record(path)

    def check(d: Any, shape: dict[str, Any], where: str) -> None:
        for key, typ in shape.items():
            if not isinstance(d, dict) or not isinstance(d.get(key), typ):
                raise Damaged(f"damaged store file {show_path(path)}: {where}{key!r} is missing or not a "
                              f"{getattr(typ, '__name__', 'number')}")

    check(obj, SHAPES[kind], "")
    if "id" in SHAPES[kind] and obj["id"] != Path(path).stem:
        raise Damaged(f"damaged store file {show_path(path)}: it holds {obj['id']!r}, not {Path(path).stem!r}")
    if kind == "event":
        check(obj, EVENT_SHAPES.get(obj["kind"], {}), f"a {obj['kind']} event's ")
    elif kind == "run":
        check({k: obj.get(k, {}) for k in ("inputs", "config")}, {"inputs": dict, "config": dict}, "")
    elif kind == "artifact":
        for entry in obj["manifest"]:
            check(entry, MANIFEST_ENTRY, "a manifest entry's ")
    return obj
