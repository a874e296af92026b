"""Canonical JSON and the one atomic-write helper every record, manifest and checkpoint goes through."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """Bytes that are identical for equal data: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def atomic_write(path: Path, data: bytes, *, exclusive: bool = False) -> bool:
    """Write `data` to `path` through a temp file in the same directory, then rename.

    Readers see either no file or the whole file, on local disks and on NFS/Lustre alike. With
    `exclusive`, an existing file is never replaced (hard link instead of rename) and False is
    returned when someone else got there first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
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


def read_record(path: Path) -> Any:
    return json.loads(path.read_bytes())
