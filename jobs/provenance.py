"""What code and which environment a run used: recorded at submit, compared on reproduce.

The code is snapshotted as an artifact: every file git tracks plus untracked files it does not
ignore (or, outside a git checkout, the project's packages). The snapshot's ID is computed at plan
time without writing anything; `store_snapshot` copies the files into the store only when no
snapshot with that ID exists yet, so identical code is stored once.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

from jobs.errors import JobsError
from lineage import Store, hashing
from lineage.layout import CODE, code_path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "runtime", "stages", "lineage", "recipes", "containers")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True)


def code_files() -> list[str]:
    """Paths, relative to the project root, of the code a run depends on."""
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z")
    if listed.returncode == 0:
        rels = [p.decode() for p in listed.stdout.split(b"\0") if p]
        # A virtual environment someone made in the checkout and forgot to ignore is environment
        # (recorded as such), not code: thousands of files, changing while pip runs.
        venvs = tuple(r[: -len("pyvenv.cfg")] for r in rels if r.endswith("/pyvenv.cfg"))
        return sorted(r for r in rels if not (venvs and r.startswith(venvs))
                      and (PROJECT_ROOT / r).is_file() and not (PROJECT_ROOT / r).is_symlink())
    found = []
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(PROJECT_ROOT / pkg):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            found += [str((Path(dirpath) / f).relative_to(PROJECT_ROOT)) for f in filenames if not f.endswith(".pyc")]
    return sorted(found)


def code_state_entries() -> list[dict]:
    """The manifest entries of the code as it is now (what `code_state` hashes)."""
    entries = []
    for rel in code_files():
        st = (PROJECT_ROOT / rel).stat()
        entries.append({"path": rel, "size": st.st_size, "digest": str(hashing.hash_file(PROJECT_ROOT / rel)),
                        "mode": hashing.normal_mode(st.st_mode)})
    return entries


def code_state() -> dict:
    """Git commit, dirty flag, and the snapshot's artifact ID (the manifest of every code file)."""
    entries = code_state_entries()
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain").stdout.strip()) if head.returncode == 0 else None
    return {
        "git_sha": head.stdout.decode().strip() if head.returncode == 0 else None,
        "dirty": dirty,
        "snapshot": hashing.artifact_id(entries),
        "files": len(entries),
        "root": str(PROJECT_ROOT),
    }


class CodeChanged(JobsError):
    """A code file changed between planning a submission and copying the code: plan again."""


def snapshot_path(store_root: Path, code: dict) -> Path:
    """Where the code snapshot of `code` (code_state()) lives in the store: what a container job runs."""
    return code_path(store_root, code["snapshot"])


def store_snapshot(store: Store, code: dict) -> str:
    """Copy the code into `<store>/code/<snapshot id>/` unless it is there; returns the artifact ID.

    The copy is hashed before it takes its name: if a file changed since the plan was made (an
    editor saving, a `git pull`), nothing is kept and the submit is refused, instead of leaving a
    folder whose name is not the ID of its content.
    """
    art_id = code["snapshot"]
    store.folder(CODE)   # code/ made without following a link planted on the way
    final = snapshot_path(store.root, code)
    if not os.path.lexists(final):
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        try:
            try:
                for rel in code_files():
                    dst = tmp / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(PROJECT_ROOT / rel, dst)
                copied = hashing.artifact_id(hashing.manifest(tmp))
            except FileNotFoundError as e:
                copied = f"unreadable: {e.filename} went away"
            if copied != art_id:
                raise CodeChanged(f"the code under {PROJECT_ROOT} changed while it was snapshotted "
                                f"(planned {art_id[:16]}, copied {copied[:40]}); submit again")
            try:
                os.rename(tmp, final)
            except OSError:  # someone else stored the same snapshot first
                pass
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    got = store.register(final, kind="code")
    if got != art_id:
        raise JobsError(f"the code snapshot {final} does not hold {art_id[:16]} (it hashes to {got[:16]}); "
                        "move it away and submit again")
    return art_id


def python_env() -> dict:
    """The interpreter and every installed distribution, with a digest over the sorted list, and the
    CPU kernels torch would run here (runtime/cpu.py): the same packages give other floats on them."""
    from runtime.cpu import cpu_kernels

    packages = {}
    for dist in metadata.distributions():
        fields = dist.metadata   # parses METADATA; dist.version would parse it again
        if fields["Name"]:
            packages[fields["Name"].lower()] = fields["Version"]
    listing = "\n".join(f"{k}=={v}" for k, v in sorted(packages.items()))
    return {
        "kind": "python",
        "python": platform.python_version(),
        "digest": str(hashing.hash_bytes(listing.encode())),
        "packages": dict(sorted(packages.items())),
        **({"cpu_kernels": kernels} if (kernels := cpu_kernels()) else {}),
    }
