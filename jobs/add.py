"""`jobs add`: bring a file or folder the user already has (a base model, a data set) into the
lineage as an artifact, so any recipe can take it with `--input ROLE=NAME:latest`.

The bytes are copied into the store first and the copy is registered (read-only, hashed in
parallel like stage outputs): the user's own folder is never made read-only, and a later edit of
it cannot change the artifact. The artifact has no producing run, so the lineage shows it as a
root, with its origin (the path, and `--source` / `--revision` when given) in its metadata.
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import time
from pathlib import Path

from jobs.errors import InputError


def readable_kinds() -> dict[str, list[str]]:
    """kind -> the `recipe/stage.role` inputs that read it, over every recipe."""
    from jobs import recipes

    kinds: dict[str, list[str]] = {}
    for name in recipes.available():
        for stage in recipes.load(name).stages.values():
            for i in stage.inputs:
                kinds.setdefault(i.kind, []).append(f"{name}/{stage.name}.{i.role}")
    return kinds


def add(store_root: Path, path: str, kind: str, name: str, source: str | None = None,
        revision: str | None = None) -> tuple[str, int]:
    """Register a copy of `path`; returns (artifact ID, version of `name`). Bad input changes nothing."""
    from lineage import Store, refs
    from lineage.errors import LineageError
    from lineage.ids import uuid7

    src = Path(path).expanduser()
    kinds = readable_kinds()
    if kind not in kinds:
        raise InputError(f"--kind {kind!r}: no stage reads that kind (kinds stages read: {', '.join(sorted(kinds))})")
    refs.check_name(name)
    if src.is_symlink() or not (src.is_file() or src.is_dir()):
        raise InputError(f"{path}: not a file or folder here" + (" (a symbolic link: pass its target)" if src.is_symlink() else ""))
    store = Store.open(store_root, create=True)
    store.ensure_writable()
    dest = store.root / "imports" / uuid7() / (src.name or "data")
    dest.parent.mkdir(parents=True)
    try:
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True)   # a link inside is refused by register, not followed
        else:
            shutil.copy2(src, dest)
        origin = {"path": str(src.absolute()), "host": socket.gethostname(), "user": getpass.getuser(),
                  "source": source, "revision": revision, "added": time.time()}
        art = store.register(dest, kind=kind, name=name, metadata={"origin": origin})
    except (OSError, LineageError):
        _remove(dest.parent)
        raise
    return art, refs.latest(store.refs, name)


def _remove(folder: Path) -> None:
    """Undo a refused import: nothing of it stays in the store."""
    for dirpath, dirnames, _ in os.walk(folder):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o755, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(folder, ignore_errors=True)
