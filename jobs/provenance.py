"""What code and which environment a run used: recorded at submit, compared on reproduce."""
from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True)


def code_state() -> dict:
    """The git commit of the project's checkout and a digest of its uncommitted diff.

    The diff digest covers tracked changes and the content of untracked, not-ignored files, so
    two checkouts with the same sha and the same digest run the same code.
    """
    head = _git("rev-parse", "HEAD")
    if head.returncode != 0:
        return {"git_sha": None, "dirty": None, "diff_digest": None, "root": str(PROJECT_ROOT)}
    h = hashlib.sha256()
    h.update(_git("diff", "HEAD", "--binary").stdout)
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z").stdout.split(b"\0")
    for rel in sorted(p for p in untracked if p):
        h.update(rel + b"\0")
        try:
            h.update((PROJECT_ROOT / rel.decode()).read_bytes())
        except OSError:
            pass
    status = _git("status", "--porcelain").stdout.strip()
    return {
        "git_sha": head.stdout.decode().strip(),
        "dirty": bool(status),
        "diff_digest": f"sha256:{h.hexdigest()}" if status else None,
        "root": str(PROJECT_ROOT),
    }


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
