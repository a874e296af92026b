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

from lineage.errors import Damaged, LineageError, NotFound, show_path
from lineage.records import read_kind, write_record

# The one grammar for artifact names and alias names: lowercase words joined by '/', each starting
# with a letter or digit, so no absolute path, no `..`, nothing that leaves refs/.
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}(/[a-z0-9][a-z0-9_.-]{0,63}){0,7}$")
ALIAS = re.compile(r"^(?P<name>[^:]+):(?P<tag>latest|v\d{1,9})$")
VERSION_FILE = re.compile(r"^v(\d{6,9})\.json$")
ART_ID = re.compile(r"^art_[0-9a-f]{64}$")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name) or ".." in name:
        raise LineageError(f"bad artifact name {show_path(name)!r}: use lowercase words joined by '/', like tiny/sft/model")
    return name


def versions(root: Path, name: str) -> list[int]:
    folder = root / check_name(name)
    if not folder.is_dir():
        return []
    if not os.path.realpath(folder).startswith(os.path.realpath(root) + os.sep):
        raise Damaged(f"damaged store: refs folder {show_path(folder)} leads outside the store (a symbolic link)")
    return sorted(int(m[1]) for p in folder.iterdir() if (m := VERSION_FILE.match(p.name)))


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


def read(path: Path) -> dict:
    """One ref version file, checked: a garbage ref is Damaged, naming the file."""
    r = read_kind(path, "ref")
    if not ART_ID.match(r["artifact"]):
        raise Damaged(f"damaged store file {show_path(path)}: {r['artifact']!r} is not an artifact ID")
    return r


def resolve(root: Path, alias: str) -> str:
    """`name:vN` or `name:latest` -> artifact ID."""
    m = ALIAS.match(alias)
    if not m:
        raise LineageError(f"bad alias {show_path(alias)!r}: use NAME:vN or NAME:latest, e.g. tiny/data/sft:latest")
    name, tag = m["name"], m["tag"]
    known = versions(root, name)
    if not known:
        raise NotFound(f"no artifact is named {name!r} (see `jobs artifacts`)")
    version = known[-1] if tag == "latest" else int(tag[1:])
    if version not in known:
        raise NotFound(f"{name} has no version v{version}; latest is v{known[-1]}")
    return read(root / name / f"v{version:06d}.json")["artifact"]
