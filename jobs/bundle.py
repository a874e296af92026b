"""The runtime bundle: what a job needs beyond its image, brought in from the shared filesystem.

A user's image (NVIDIA's, or any other) carries Python, torch and the ML libraries, but not the
job's own machinery: submitit (which starts the job and unpickles it) and what submitit imports.
The bundle is those distributions' pure-Python files, copied from this environment, so it works
with whatever Python minor version the image has. It lives at `<store>/runtime/<digest>/`, named
by the SHA-256 of its manifest, written once, read-only; the job appends it to `sys.path` after the
image's own packages (runtime/bootstrap.py), so the image's copy of a shared library wins.

Nothing else is bundled: the stage's own libraries (torch, transformers, ray, vllm) must come with
the image, and the job says in one line which one is missing (runtime/bootstrap.py).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from jobs.errors import JobsError
from lineage.layout import runtime_path

#: The distributions a job imports before the stage runs, beyond the standard library and this
#: project: submitit and its requirements (the closure is followed from the installed metadata).
ROOTS = ("submitit",)
#: Only these files of a distribution's metadata folder travel: what importlib.metadata reads.
METADATA_FILES = ("METADATA", "top_level.txt")
#: Compiled files never travel: they are built for one Python and one platform.
COMPILED = (".so", ".pyd", ".dylib", ".pyc")


class BundleError(JobsError):
    """The bundle cannot be made from this environment (a missing or compiled distribution)."""


@dataclass(frozen=True)
class Bundle:
    """What the job brings into the image: files (destination -> source) and their digest."""

    digest: str                       # sha256:<hex> of the manifest
    packages: dict                    # distribution -> version
    files: dict                       # relative path in the bundle -> source file

    def path(self, store_root: Path) -> Path:
        return runtime_path(store_root) / self.digest.split(":", 1)[1]

    def record(self, store_root: Path) -> dict:
        return {"digest": self.digest, "path": str(self.path(store_root)), "packages": self.packages}


def _requirements(dist: metadata.Distribution) -> list[str]:
    """Names of the distributions `dist` needs unconditionally (no extras, no environment markers
    that can be false: a marker is kept only when it is about the Python version, which every
    supported image satisfies for these packages)."""
    names = []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        name = re.match(r"\s*([A-Za-z0-9_.-]+)", spec)
        if name:
            names.append(name.group(1))
    return names


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(roots: tuple[str, ...] = ROOTS) -> list[metadata.Distribution]:
    """`roots` and everything they require, as installed here."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise BundleError(f"the runtime bundle needs {name}, which is not installed here "
                              "(pip install -e . installs it)") from None
        found[name] = dist
        todo += _requirements(dist)
    return [found[k] for k in sorted(found)]


def collect(roots: tuple[str, ...] = ROOTS) -> Bundle:
    """The bundle's files and digest, from the installed distributions; nothing is written."""
    from lineage import hashing

    files: dict[str, Path] = {}
    packages: dict[str, str] = {}
    for dist in distributions(roots):
        packages[dist.metadata["Name"]] = dist.version
        for f in dist.files or []:
            rel = str(f)
            parts = Path(rel).parts
            if not parts or parts[0] == ".." or "__pycache__" in parts:
                continue   # scripts in bin/, byte code
            if parts[0].endswith(".dist-info"):
                if parts[-1] not in METADATA_FILES:
                    continue
            elif rel.endswith(COMPILED):
                # pyyaml-style accelerators have a pure-Python fallback; a package without one
                # cannot travel into an image of another Python.
                raise BundleError(f"{dist.metadata['Name']} has a compiled module ({rel}); the runtime bundle "
                                  "carries pure-Python distributions only")
            source = Path(f.locate())
            if source.is_file():
                files[rel] = source
    entries = []
    for rel, source in sorted(files.items()):
        st = source.stat()
        entries.append({"path": rel, "size": st.st_size, "digest": str(hashing.hash_file(source)),
                        "mode": hashing.normal_mode(st.st_mode)})
    digest = "sha256:" + hashing.artifact_id(entries).removeprefix("art_")
    return Bundle(digest=digest, packages=dict(sorted(packages.items())), files=files)


def store(bundle: Bundle, store_root: Path) -> Path:
    """Write the bundle to `<store>/runtime/<hex>/` unless it is there; the folder.

    Copied to a temporary folder beside it, hashed, made read-only and renamed into place: a
    folder with the final name always holds exactly the bundle its name says (two submits that
    write the same bundle at once both succeed; one rename wins).
    """
    from lineage import hashing
    from lineage.store import make_read_only

    final = bundle.path(store_root)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        for rel, source in bundle.files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dst)
            os.chmod(dst, hashing.normal_mode(source.stat().st_mode))
        got = "sha256:" + hashing.artifact_id(hashing.manifest(tmp)).removeprefix("art_")
        if got != bundle.digest:
            raise BundleError(f"the runtime bundle changed while it was copied (planned {bundle.digest[:19]}, "
                              f"copied {got[:19]}): is pip installing? submit again")
        os.chmod(tmp, 0o755)
        make_read_only(tmp)
        try:
            os.rename(tmp, final)
        except OSError:   # another submit stored the same bundle first
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            for dirpath, _, _ in os.walk(tmp):
                os.chmod(dirpath, 0o755)
            shutil.rmtree(tmp)
    return final
