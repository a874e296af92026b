"""Canonical JSON and the one atomic-write helper every record, manifest and checkpoint goes through."""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """Bytes that are identical for equal data: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def atomic_write(path: Path, data: bytes, *, exclusive: bool = False, mode: int | None = None) -> bool:
    """Write `data` to `path` through a temp file in the same directory, then rename.

    Readers see either no file or the whole file, on local disks and on NFS/Lustre alike. With
    `exclusive`, an existing file is never replaced (hard link instead of rename) and False is
    returned when someone else got there first. `mode` sets the file's permission bits (a temp
    file is made 0600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        os.replace(tmp, path)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_record(path: Path, obj: Any, *, exclusive: bool = True) -> bool:
    return atomic_write(path, canonical_json(obj) + b"\n", exclusive=exclusive)


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
