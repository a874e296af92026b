"""Names for artifacts: `tiny/sft/model:v3`, `tiny/sft/model:latest`.

Each version is its own immutable file, `refs/<name>/v000003.json`, created with a hard link so two
writers can never take the same number (link creation is atomic on NFS too). The folder is the
append-only log.

Registering and resolving never list the folder, which costs seconds on Lustre at 100k versions.
`refs/<name>/.latest` holds the highest version its writer knew. It is only a hint: it may lag
(two writers, a crash between the link and the hint), be missing (a store written before it
existed) or be garbage, and each of those only costs a few more probes, never a wrong answer.
From the hint, the search probes single files forward (doubling its stride, then bisecting) to a
version that exists whose successor does not: that is `:latest`. The search is exact because
numbers have no gaps: a writer only ever takes the first free number after one it saw exist.
"""
from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from lineage.errors import Damaged, LineageError, NotFound, show_path
from lineage.records import atomic_write, read_kind, write_record

# The one grammar for artifact names and alias names: lowercase words joined by '/', each starting
# with a letter or digit, so no absolute path, no `..`, nothing that leaves refs/; and no word shaped
# like a version file (`v000002.json`), whose folder would sit where a version of the name above
# belongs and break its `:latest`, listings and the index.
_WORD = r"(?!v[0-9]+\.json(?:/|$))[a-z0-9][a-z0-9_.-]{0,63}"
NAME = re.compile(rf"^{_WORD}(/{_WORD}){{0,7}}$")
ALIAS = re.compile(r"^(?P<name>[^:]+):(?P<tag>latest|v\d{1,9})$")
VERSION_FILE = re.compile(r"^v(\d{6,9})\.json$")
ART_ID = re.compile(r"^art_[0-9a-f]{64}$")
HINT = ".latest"  # starts with '.', so no name, no version file and no index scan ever sees it
MAX_VERSION = 10**9 - 1


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name) or ".." in name:
        why = " (a word shaped like a version file, vNNNNNN.json, is the store's own)" if isinstance(name, str) and \
            re.search(r"(^|/)v[0-9]+\.json(/|$)", name) else ""
        raise LineageError(f"bad artifact name {show_path(name)!r}: use lowercase words joined by '/', like "
                           f"tiny/sft/model{why}")
    return name


def _folder(root: Path, name: str) -> Path:
    """The name's folder, refused (Damaged) when a symbolic link makes it lead outside the store."""
    folder = root / check_name(name)
    if folder.is_dir() and not os.path.realpath(folder).startswith(os.path.realpath(root) + os.sep):
        raise Damaged(f"damaged store: refs folder {show_path(folder)} leads outside the store (a symbolic link)")
    return folder


def check_folders(root: Path, name: str) -> None:
    """Each folder on the way to the name's versions is a real folder, or absent: a file or link in
    its place is refused (Damaged) before anything is copied, not after the artifact is recorded."""
    at = root
    for word in name.split("/"):
        at = at / word
        try:
            st = at.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a file" if stat.S_ISREG(st.st_mode) \
                else "not a folder"
            raise Damaged(f"damaged store: {show_path(at)} is {kind}, where the folder of name "
                          f"{'/'.join(at.relative_to(root).parts)} belongs; move it aside")


def holding_version(root: Path, name: str, art: str) -> int | None:
    """The newest version of `name` that points at `art`, or None."""
    folder = root / name
    for v in reversed(versions(root, name)):
        try:
            if read(version_path(folder, v))["artifact"] == art:
                return v
        except LineageError:
            continue
    return None


def version_path(folder: Path, version: int) -> Path:
    return folder / f"v{version:06d}.json"


def versions(root: Path, name: str) -> list[int]:
    """Every version of `name`, by listing its folder: O(versions), for listings and rebuilds only."""
    folder = _folder(root, name)
    if not folder.is_dir():
        return []
    return sorted(int(m[1]) for p in folder.iterdir() if (m := VERSION_FILE.match(p.name)))


def _hint(folder: Path) -> int:
    """The version the hint names, 0 when it is missing, unreadable or garbage."""
    try:
        fd = os.open(folder / HINT, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        text = os.read(fd, 16)
    except OSError:
        return 0
    finally:
        os.close(fd)
    try:
        n = int(text.strip() or b"x")
    except ValueError:
        return 0
    return n if 0 <= n <= MAX_VERSION else 0


def _latest(folder: Path) -> int:
    """The highest version in `folder` (0 for none), in O(log distance from the hint) single-file probes."""
    def has(v: int) -> bool:
        return v == 0 or os.path.lexists(version_path(folder, v))

    start = _hint(folder)
    if has(start):      # the hint is right or lags: gallop forward to a missing version
        lo, step = start, 1
        while has(start + step):
            lo, step = start + step, step * 2
        hi = start + step
    else:               # the hint is ahead of the truth (garbage, or versions moved aside): gallop back
        hi, step = start, 1
        while not has(max(0, start - step)):
            hi, step = start - step, step * 2
        lo = max(0, start - step)
    while hi - lo > 1:  # has(lo) and not has(hi): bisect to the boundary
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if has(mid) else (lo, mid)
    return lo


def latest(root: Path, name: str) -> int:
    """The highest version of `name`, 0 when it has none."""
    folder = _folder(root, name)
    return _latest(folder) if folder.is_dir() else 0


def add(root: Path, name: str, artifact: str, run: str | None) -> int:
    """Append a version of `name` pointing at `artifact`; returns its number.

    The exclusive link is what makes the number ours: losing a race to another writer only moves
    us to the next number. The hint is written after, without a lock, and may end up a little low.
    """
    folder = _folder(root, name)
    version = (_latest(folder) if folder.is_dir() else 0) + 1
    while True:
        entry = {"name": name, "version": version, "artifact": artifact, "run": run, "time": time.time()}
        if write_record(version_path(folder, version), entry, exclusive=True):
            break
        version += 1
    write_hint(folder, version)
    os.utime(root)  # tells the index, at a glance, that some name has a new version
    return version


def hint_mode(folder_mode: int) -> int:
    """The hint is read by whoever may list its folder and rewritten by whoever may write it (the
    store's group on a team store): every member resolves `:latest` from it."""
    return (folder_mode & 0o444) | (folder_mode & 0o020) | 0o600


def write_hint(folder: Path, version: int) -> None:
    """Replace the hint; in a team store's sticky folder another member's hint cannot be replaced,
    so it is rewritten in place (a reader may see it half written: garbage costs probes, nothing
    more). A hint that cannot be written at all is left as it is."""
    try:
        atomic_write(folder / HINT, b"%d\n" % version, mode=hint_mode)
        return
    except PermissionError:
        pass
    try:
        fd = os.open(folder / HINT, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            line = b"%d\n" % version
            os.pwrite(fd, line.rjust(16), 0)   # as long as a hint is read: no tail of a longer one stays
            os.ftruncate(fd, 16)
    except OSError:
        pass
    finally:
        os.close(fd)


def read(path: Path) -> dict:
    """One ref version file, checked: a garbage ref is Damaged, naming the file."""
    r = read_kind(path, "ref")
    if not ART_ID.match(r["artifact"]):
        raise Damaged(f"damaged store file {show_path(path)}: {r['artifact']!r} is not an artifact ID")
    return r


def resolve(root: Path, alias: str, passed_over=None) -> str:
    """`name:vN` (one file read) or `name:latest` (a few probes from the hint) -> artifact ID.

    `passed_over(entry) -> bool`: versions `:latest` steps back over, newest first (the store's: those
    a reproduction added); when every version is, the newest."""
    m = ALIAS.match(alias)
    if not m:
        raise LineageError(f"bad alias {show_path(alias)!r}: use NAME:vN or NAME:latest, e.g. tiny/data/sft:latest")
    name, tag = m["name"], m["tag"]
    folder = _folder(root, name)
    if tag == "latest" or not os.path.lexists(version_path(folder, int(tag[1:]))):
        last = _latest(folder) if folder.is_dir() else 0
        if not last:
            raise NotFound(f"no artifact is named {name!r} in {show_path(root.parent)} (see `jobs artifacts`)")
        if tag != "latest":
            raise NotFound(f"{name} has no version v{int(tag[1:])}; latest is v{last}")
        newest = entry = read(version_path(folder, last))
        while passed_over is not None and passed_over(entry) and entry["version"] > 1:
            try:
                entry = read(version_path(folder, entry["version"] - 1))
            except (LineageError, OSError):   # a version moved aside: the newest stands
                return newest["artifact"]
        return newest["artifact"] if passed_over is not None and passed_over(entry) else entry["artifact"]
    return read(version_path(folder, int(tag[1:])))["artifact"]
