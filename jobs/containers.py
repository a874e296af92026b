"""Container images by logical name, pinned by digest in containers/containers.lock.

A Slurm run names its image by digest, never by tag: a re-pushed tag cannot silently change what
a recorded run used. `--allow-unpinned` accepts a tag-only entry, and the record says so.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from jobs.errors import ExecutorError

LOCK = Path(os.environ.get("JOBS_CONTAINERS_LOCK", Path(__file__).resolve().parent.parent / "containers" / "containers.lock"))
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Image:
    name: str          # logical name, e.g. "nemo-rl"
    image: str         # registry/repo:tag
    digest: str | None  # sha256:…, None when not pinned
    libraries: dict = field(default_factory=dict, compare=False, hash=False)  # what the image carries, e.g. {megatron_bridge: nano-v3}

    @property
    def pinned(self) -> bool:
        return bool(self.digest and DIGEST.match(self.digest))

    @property
    def reference(self) -> str:
        """registry/repo@sha256:… when pinned, else registry/repo:tag."""
        if self.pinned:
            return f"{self.image.rsplit(':', 1)[0] if _has_tag(self.image) else self.image}@{self.digest}"
        return self.image

    @property
    def pyxis(self) -> str:
        """Pyxis/enroot spell the registry with '#': nvcr.io#nvidia/nemo@sha256:…"""
        ref = self.reference
        head, sep, rest = ref.partition("/")
        if sep and ("." in head or ":" in head or head == "localhost"):
            return f"{head}#{rest}"
        return ref


def _has_tag(image: str) -> bool:
    return ":" in image.rsplit("/", 1)[-1]


def load_lock(path: Path | None = None) -> dict[str, Image]:
    path = path or LOCK
    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text()) or {}
    raw = raw.get("images", raw)
    return {name: Image(name, entry["image"], entry.get("digest") or None, dict(entry.get("libraries") or {}))
            for name, entry in raw.items()}


def resolve(name: str, allow_unpinned: bool = False) -> Image:
    images = load_lock()
    if name not in images:
        raise ExecutorError(f"container {name!r} is not in {LOCK} (images: {', '.join(sorted(images)) or 'none'})")
    image = images[name]
    if not image.pinned and not allow_unpinned:
        raise ExecutorError(f"container {name!r} ({image.image}) is not pinned by digest in {LOCK}: "
                            f"pin it with `jobs containers pin {name}` or pass --allow-unpinned")
    return image


def pin(name: str, digest: str, path: Path | None = None) -> Image:
    """Write `digest` for `name` into the lock (atomically), keeping every other line as it was."""
    from lineage.records import atomic_write

    path = path or LOCK
    if not DIGEST.match(digest):
        raise ExecutorError(f"bad digest {digest!r}: expected sha256: and 64 lowercase hex digits")
    images = load_lock(path)
    if name not in images:
        raise ExecutorError(f"container {name!r} is not in {path} (images: {', '.join(sorted(images)) or 'none'})")
    lines = path.read_text().splitlines(keepends=True)
    inside, done = False, False
    for i, line in enumerate(lines):
        if not line.startswith((" ", "#", "\n")):
            inside = line.split(":")[0].strip() == name
        elif inside and line.strip().startswith("digest:"):
            indent = line[: len(line) - len(line.lstrip())]
            lines[i] = f"{indent}digest: {digest}\n"
            done = True
    if not done:
        raise ExecutorError(f"{path}: entry {name!r} has no digest line to update")
    atomic_write(path, "".join(lines).encode())
    return load_lock(path)[name]


def squashfs_name(image: Image) -> str:
    """The local squashfs for an image, named by its digest so a re-pushed tag never goes stale."""
    if not image.pinned:
        raise ExecutorError(f"container {image.name!r} is not pinned: pin it before importing")
    repo = image.image.rsplit(":", 1)[0] if _has_tag(image.image) else image.image
    return f"{repo.replace('/', '+')}@sha256_{image.digest.split(':', 1)[1]}.sqsh"


def import_commands(image: Image, folder: Path, srun: bool = False) -> list[list[str]]:
    """`enroot import` into folder/<name by digest>.sqsh; on a login node, through srun on a compute node."""
    target = folder / squashfs_name(image)
    cmd = ["enroot", "import", "--output", str(target), f"docker://{image.pyxis}"]
    if srun:
        cmd = ["srun", "--nodes=1", "--ntasks=1", "--exclusive", *cmd]
    return [["mkdir", "-p", str(folder)], cmd]
