"""Names for artifacts: `tiny/sft/model:v3`, `tiny/sft/model:latest`.

Each version is its own immutable file, `refs/<name>/v000003.json`, created with a hard link so two
writers can never take the same number (link creation is atomic on NFS too). The folder is the
append-only log; `:latest` is its highest version.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from lineage.errors import LineageError, NotFound
from lineage.records import read_record, write_record

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*$")
ALIAS = re.compile(r"^(?P<name>[^:]+):(?P<tag>latest|v\d+)$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise LineageError(f"bad artifact name {name!r}: use lowercase words joined by '/', like tiny/sft/model")
    return name


def versions(root: Path, name: str) -> list[int]:
    folder = root / name
    if not folder.is_dir():
        return []
    return sorted(int(p.name[1:-5]) for p in folder.iterdir() if p.name.startswith("v") and p.name.endswith(".json"))


def add(root: Path, name: str, artifact: str, run: str | None) -> int:
    """Append a version of `name` pointing at `artifact`; returns its number."""
    check_name(name)
    version = (versions(root, name) or [0])[-1] + 1
    while True:
        entry = {"name": name, "version": version, "artifact": artifact, "run": run, "time": time.time()}
        if write_record(root / name / f"v{version:06d}.json", entry, exclusive=True):
            os.utime(root)  # tells the index, at a glance, that some name has a new version
            return version
        version += 1


def resolve(root: Path, alias: str) -> str:
    """`name:vN` or `name:latest` -> artifact ID."""
    m = ALIAS.match(alias)
    if not m:
        raise LineageError(f"bad alias {alias!r}: use NAME:vN or NAME:latest, e.g. tiny/data/sft:latest")
    name, tag = m["name"], m["tag"]
    known = versions(root, name)
    if not known:
        raise NotFound(f"no artifact is named {name!r} (see `jobs artifacts`)")
    version = known[-1] if tag == "latest" else int(tag[1:])
    if version not in known:
        raise NotFound(f"{name} has no version v{version}; latest is v{known[-1]}")
    return read_record(root / name / f"v{version:06d}.json")["artifact"]
