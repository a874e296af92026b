"""`jobs add`: bring a file or folder the user already has (a base model, a data set) into the
lineage as an artifact, so any recipe can take it with `--input ROLE=NAME:latest`.

The bytes are copied into the store first and the copy is registered (read-only, hashed in
parallel like stage outputs): the user's own folder is never made read-only, and a later edit of
it cannot change the artifact. The artifact has no producing run, so the lineage shows it as a
root, with its origin (the path, and `--source` / `--revision` when given) in its metadata.

Everything a user can get wrong is refused before the store is created or written: the kind, the
name, and every entry of the folder, lstat-ed (a link, FIFO, socket or device node is named and
refused; none is ever opened). The copy opens each file without following links or blocking and
checks it is still a regular file, so nothing swapped in meanwhile is streamed. Content already in
the store (same artifact ID, files that verify) is not copied again: the name gets a version only
if none of its versions holds it yet. A refused or failed add leaves nothing behind.
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.errors import InputError


@dataclass(frozen=True)
class Added:
    """What `jobs add` did: the artifact, the version of the name that holds it, and whether this
    add made that version (False: an earlier version already held the same content)."""

    artifact: str
    name: str
    version: int
    new_version: bool
    copied: bool


def readable_kinds() -> dict[str, list[str]]:
    """kind -> the `recipe/stage.role` inputs that read it, over every recipe."""
    from jobs import recipes

    kinds: dict[str, list[str]] = {}
    for name in recipes.available():
        for stage in recipes.load(name).stages.values():
            for i in stage.inputs:
                kinds.setdefault(i.kind, []).append(f"{name}/{stage.name}.{i.role}")
    return kinds


def _kind_of(st: os.stat_result) -> str:
    m = st.st_mode
    return ("a file" if stat.S_ISREG(m) else "a symbolic link (pass its target, or copy the file in)" if stat.S_ISLNK(m)
            else "a FIFO" if stat.S_ISFIFO(m)
            else "a socket" if stat.S_ISSOCK(m) else "a device node" if stat.S_ISCHR(m) or stat.S_ISBLK(m)
            else "not a regular file")


def _utf8(name: str, where: Path) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = ascii(str(where).encode("utf-8", "surrogateescape"))[2:-1]
        raise InputError(f"'{shown}': its name is not valid UTF-8; rename it (records are UTF-8 JSON)") from None


def check_source(src: Path) -> None:
    """Every entry under `src` is a plain file or folder with a UTF-8 name; nothing is opened."""
    from lineage.errors import show_path

    _utf8(str(src.absolute()), src)
    st = src.lstat()
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise InputError(f"{show_path(src)} is {_kind_of(st)}: only plain files and folders can be added")
    stack = [src] if stat.S_ISDIR(st.st_mode) else []
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            raise InputError(f"cannot read {show_path(folder)}: {e.strerror or e}") from None
        for entry in entries:
            path = Path(entry.path)
            _utf8(entry.name, path)
            est = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode):
                stack.append(path)
            elif not stat.S_ISREG(est.st_mode):
                raise InputError(f"{show_path(path)} is {_kind_of(est)}: an artifact holds only plain files and "
                                 "folders; nothing was added")


def _copy_file(src: Path, dest: Path) -> dict:
    """Copy one regular file, hashing as it goes; returns its manifest entry (path filled by the caller).

    Opened without following a link and without blocking: a FIFO, device or link put in the file's
    place after the check is refused, never read.
    """
    from lineage import Store
    from lineage.errors import show_path

    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"cannot read {show_path(src)}: {e.strerror or e}") from None
    with open(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{show_path(src)} is {_kind_of(st)}: an artifact holds only plain files and folders")
        return Store.copy_hashed(f, dest, st)


def copy_tree(src: Path, dest: Path) -> list[dict]:
    """Copy `src` (a file or folder) to `dest`; returns the copy's manifest, as lineage.hashing makes it."""
    if not src.is_dir() or src.is_symlink():
        return [{"path": dest.name, **_copy_file(src, dest)}]
    entries = []
    stack = [(src, dest, "")]
    while stack:
        folder, target, rel = stack.pop()
        target.mkdir(mode=0o755)
        with os.scandir(folder) as it:
            children = sorted(it, key=lambda e: e.name)
        for entry in children:
            sub = f"{rel}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), target / entry.name, sub + "/"))
            else:
                entries.append({"path": sub, **_copy_file(Path(entry.path), target / entry.name)})
    return sorted(entries, key=lambda e: e["path"])


def _verifies(store, art: str) -> bool:
    from lineage.errors import LineageError

    try:
        store.verify(art)
        return True
    except LineageError:
        return False


def add(store_root: Path, path: str, kind: str, name: str, source: str | None = None,
        revision: str | None = None) -> Added:
    """Register a copy of `path` under `name`. Bad input changes nothing, not even a missing store."""
    from lineage import Store
    from lineage.secrets import redact
    from lineage.store import MARKER

    src = Path(path).expanduser()
    kinds = readable_kinds()
    if kind not in kinds:
        raise InputError(f"--kind {kind!r}: no stage reads that kind (kinds stages read: {', '.join(sorted(kinds))})")
    Store(Path(store_root).expanduser()).check_alias(name)   # reads only: a store not made yet stays unmade
    for what, text in (("--source", source), ("--revision", revision)):
        if text is not None:
            _utf8(text, Path(what))
    if not os.path.lexists(src) or src.is_symlink() or not (src.is_file() or src.is_dir()):
        raise InputError(f"{path}: not a file or folder here" + (" (a symbolic link: pass its target)" if src.is_symlink() else ""))
    check_source(src)
    check_layout(src, kind, kinds[kind])

    existed = (Path(store_root).expanduser() / MARKER).exists()
    store = Store.open(store_root, create=True)
    # `..` or `.` names no folder to copy into: the folder's own name (of its absolute path) does.
    dest = store.import_folder(Path(os.path.abspath(src)).name or "data")
    try:
        store.ensure_writable()
        dest.parent.mkdir(parents=True)
        entries = copy_tree(src, dest)
        art = store.artifact_id(entries)
        if _verifies(store, art):                  # the same bytes are in the store already: no second copy
            had = store.artifact(art).get("kind")
            if had != kind:
                raise InputError(same_bytes_other_kind(store, art, had, kind, kinds))
            _remove(dest.parent)
            version, made = store.alias(name, art)
            return Added(art, name, version, new_version=made, copied=False)
        origin = redact({"path": str(src.absolute()), "host": socket.gethostname(), "user": getpass.getuser(),
                         "source": source, "revision": revision, "added": time.time()})
        fresh = not store.has_artifact(art)
        registered = store.register(dest, kind=kind, metadata={"origin": origin})
        if registered != art:  # changed between the copy and the registration: keep nothing of it
            raise InputError(f"{path} changed while it was copied; add it again")
        try:
            return Added(art, name, store.alias(name, art, reuse=False)[0], new_version=True, copied=True)
        except BaseException:
            if fresh:   # no record may point at the copy removed below
                store.remove_artifact_records(art)
            raise
    except BaseException:
        _remove(dest.parent)
        _undo_store(store.root, created=not existed)
        raise


def check_layout(src: Path, kind: str, readers: list[str]) -> None:
    """The folder holds what the stages that read `kind` open (stages/layouts.py), before any copy."""
    from stages.layouts import problems

    wrong = problems(kind, src)
    if wrong:
        raise InputError(f"{src} cannot be read as {kind} (by {', '.join(readers[:3])}): {'; '.join(wrong)}; nothing was added")


def same_bytes_other_kind(store, art: str, had: str, kind: str, kinds: dict[str, list[str]]) -> str:
    """Why the same bytes cannot be added as another kind: an artifact is its bytes, with one kind."""
    names = store.index().names_of(art)
    known = f" ({', '.join(names[:2])})" if names else ""
    use = (f"; pass it as it is where {had} is read (--input ROLE={names[0] if names else art})" if had in kinds
           else f"; no stage reads {had}")
    return (f"these bytes are already artifact {art[:16]}{known} of kind {had}, and an artifact (its ID is its "
            f"bytes') has one kind, so they cannot also be a {kind}{use}; nothing was added")


def origin(record: dict) -> str | None:
    """Where an added artifact came from, in one line (`jobs show`, `jobs lineage`), else None."""
    o = (record.get("metadata") or {}).get("origin")
    if not isinstance(o, dict):
        return None
    from jobs.errors import one_line

    where = " ".join(x for x in (o.get("source"), f"@ {o['revision']}" if o.get("revision") else None) if x)
    copied = f"added from {o.get('path')} on {o.get('host')}" if o.get("path") else "added"
    # A terminal control sequence in --source or a path is printed escaped, never run by the terminal.
    return one_line(f"{where} ({copied})" if where else copied)


def _remove(folder: Path) -> None:
    """Undo a refused import: nothing of it stays in the store (imports/ itself is the store's own folder)."""
    for dirpath, dirnames, _ in os.walk(folder):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o755, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    try:
        os.chmod(folder, 0o755, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass
    shutil.rmtree(folder, ignore_errors=True)


def _undo_store(root: Path, created: bool) -> None:
    """A store this add created and nothing else wrote to is removed again."""
    from lineage.store import MARKER

    if not created:
        return
    try:
        for dirpath, _, files in os.walk(root):   # its own empty folders and the marker, nothing more
            if any(f != MARKER or dirpath != str(root) for f in files):
                return
        (root / MARKER).unlink(missing_ok=True)
        for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
            os.rmdir(dirpath)
    except OSError:
        pass
