"""What code and which environment a run used: recorded at submit, compared on reproduce.

The code is snapshotted as an artifact: every file git tracks plus untracked files it does not
ignore (or, outside a git checkout, the project's packages). The snapshot's ID is computed at plan
time without writing anything; `store_snapshot` copies the files into the store only when no
snapshot with that ID exists yet, so identical code is stored once.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

from lineage import Store, hashing

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "stages", "lineage", "recipes", "containers")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True)


def code_files() -> list[str]:
    """Paths, relative to the project root, of the code a run depends on."""
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z")
    if listed.returncode == 0:
        rels = [p.decode() for p in listed.stdout.split(b"\0") if p]
        return sorted(r for r in rels if (PROJECT_ROOT / r).is_file() and not (PROJECT_ROOT / r).is_symlink())
    found = []
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(PROJECT_ROOT / pkg):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            found += [str((Path(dirpath) / f).relative_to(PROJECT_ROOT)) for f in filenames if not f.endswith(".pyc")]
    return sorted(found)


def code_state() -> dict:
    """Git commit, dirty flag, and the snapshot's artifact ID (the manifest of every code file)."""
    files = code_files()
    entries = []
    for rel in files:
        st = (PROJECT_ROOT / rel).stat()
        entries.append({"path": rel, "size": st.st_size, "digest": str(hashing.hash_file(PROJECT_ROOT / rel)),
                        "mode": hashing.normal_mode(st.st_mode)})
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain").stdout.strip()) if head.returncode == 0 else None
    return {
        "git_sha": head.stdout.decode().strip() if head.returncode == 0 else None,
        "dirty": dirty,
        "snapshot": hashing.artifact_id(entries),
        "files": len(entries),
        "root": str(PROJECT_ROOT),
    }


def store_snapshot(store: Store, code: dict) -> str:
    """Copy the code into `<store>/code/<snapshot id>/` unless it is there; returns the artifact ID."""
    art_id = code["snapshot"]
    final = store.root / "code" / art_id
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        for rel in code_files():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / rel, dst)
        try:
            os.rename(tmp, final)
        except OSError:  # someone else stored the same snapshot first
            shutil.rmtree(tmp)
    got = store.register(final, kind="code")
    if got != art_id:
        raise RuntimeError(f"code changed while it was snapshotted ({art_id} != {got}); submit again")
    return art_id


def python_env() -> dict:
    """The interpreter and every installed distribution, with a digest over the sorted list."""
    packages = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            packages[name.lower()] = dist.version
    listing = "\n".join(f"{k}=={v}" for k, v in sorted(packages.items()))
    return {
        "kind": "python",
        "python": platform.python_version(),
        "digest": "sha256:" + hashlib.sha256(listing.encode()).hexdigest(),
        "packages": dict(sorted(packages.items())),
    }
