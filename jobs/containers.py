"""`jobs containers`: resolve an image by name, pin a digest into the lock, import it to squashfs.

`--allow-unpinned` accepts a tag-only entry, and the record says so.
"""
from __future__ import annotations

from pathlib import Path

import containers as pins
from containers import DIGEST, Image, _has_tag, load_lock
from jobs.errors import ExecutorError


def resolve(name: str, allow_unpinned: bool = False) -> Image:
    images = load_lock()
    if name not in images:
        raise ExecutorError(f"container {name!r} is not in {pins.LOCK} (images: {', '.join(sorted(images)) or 'none'})")
    image = images[name]
    if not image.pinned and not allow_unpinned:
        raise ExecutorError(f"container {name!r} ({image.image}) is not pinned by digest in {pins.LOCK}: "
                            f"pin it with `jobs containers pin {name}` or pass --allow-unpinned")
    return image


def pin(name: str, digest: str, path: Path | None = None) -> Image:
    """Write `digest` for `name` into the lock (atomically), keeping every other line as it was."""
    from lineage.records import atomic_write

    path = path or pins.LOCK
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


def command(action: str, name: str | None, digest: str | None = None, folder: str = "~/.cache/jobs/enroot",
            srun: bool = False, dry_run: bool = False, echo=print) -> int:
    """`jobs containers list|pin|import`."""
    import shlex
    import shutil
    import subprocess

    if action == "list":
        for n, image in sorted(load_lock().items()):
            echo(f"{n:<10} {image.reference}" + ("" if image.pinned else "   (NOT PINNED)"))
        return 0
    if not name:
        raise ExecutorError(f"`jobs containers {action}` needs an image name (see `jobs containers list`)")
    if action == "pin":
        if not digest:
            raise ExecutorError("no registry is reachable from here: pass the digest, "
                                f"`jobs containers pin {name} --digest sha256:…` (from `docker buildx imagetools inspect`)")
        echo(f"{name} pinned: {pin(name, digest).reference}")
        return 0
    image = resolve(name)
    where = Path(folder).expanduser()
    commands = import_commands(image, where, srun=srun)
    if dry_run:
        echo("\n".join(shlex.join(c) for c in commands))
        return 0
    if (where / squashfs_name(image)).exists():
        echo(f"{where / squashfs_name(image)} already holds {image.reference}")
        return 0
    if not shutil.which("enroot") and not srun:
        raise ExecutorError("enroot is not installed on this machine: run with --srun on a Slurm cluster, or --dry-run")
    for c in commands:
        subprocess.run(c, check=True)
    echo(f"imported {image.reference} to {where / squashfs_name(image)}")
    return 0
