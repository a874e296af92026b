"""`jobs containers`: resolve an image by name, pin a digest into the lock, import it to a squashfs.

Two runtimes share everything but the import and the job's command line: `pyxis` (enroot, what
NVIDIA's clusters run) and `charliecloud` (ch-image pulls, ch-run runs a squashfs unprivileged).
A squashfs is named by the image's digest, made once per digest (a lock file; a second importer
waits and reuses it), and only from bytes whose SHA-256 matches the pin.
`--allow-unpinned` accepts a tag-only entry, and the record says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import containers as pins
from containers import DIGEST, Image, load_lock
from jobs.errors import ExecutorError

RUNTIMES = ("pyxis", "charliecloud")
DEFAULT_DIRS = {"pyxis": "~/.cache/jobs/enroot", "charliecloud": "~/.cache/jobs/charliecloud"}


def resolve(name: str, allow_unpinned: bool = False) -> Image:
    images = load_lock()
    where = _lock_names()
    if name not in images:
        raise ExecutorError(f"container {name!r} is not in {where} (images: {', '.join(sorted(images)) or 'none'})")
    image = images[name]
    if not image.pinned and not allow_unpinned:
        raise ExecutorError(f"container {name!r} ({image.image}) is not pinned by digest in {where}: "
                            f"pin it with `jobs containers pin {name}` or pass --allow-unpinned")
    return image


def _lock_names() -> str:
    extra = pins.override()
    return f"{pins.LOCK} (+ {extra})" if extra else str(pins.LOCK)


# An image reference as registries spell it: [host[:port]/]path[:tag], lowercase path components.
REFERENCE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?"
                       r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


def pin(name: str, digest: str, path: Path | None = None, image: str | None = None) -> Image:
    """Write `digest` (and `image`, when given) for `name` into a lock, atomically, keeping every other
    line as it was. The lock is `path`, else $JOBS_CONTAINERS_LOCK, else the committed one; an entry
    the machine's lock lacks is added to it, and with `image` the machine's lock may name an image of its
    own, one the committed lock lacks (a site's image; the dev cluster's CPU twins). Every value is written YAML-quoted, and the new text is
    read back through the lock's one reader (containers.parse_lock) before it replaces the old: it
    must say exactly what was pinned and keep every other entry as it was."""
    from lineage.records import atomic_write

    if not DIGEST.match(digest):
        raise ExecutorError(f"bad digest {digest!r}: expected sha256: and 64 lowercase hex digits")
    if image is not None and not REFERENCE.match(image):
        raise ExecutorError(f"bad image {image!r}: expected registry/repo:tag")
    path = path or pins.override() or pins.LOCK
    known = load_lock(path) if path != pins.override() else load_lock()
    if name not in known and not (image and path == pins.override()):
        raise ExecutorError(f"container {name!r} is not in {path} (images: {', '.join(sorted(known)) or 'none'})")
    text = path.read_text() if path.is_file() else ""
    partial = path == pins.override()
    old = pins.parse_lock(text, path, partial)
    want = {**old.get(name, {}), "digest": digest, **({"image": image} if image else {})}
    if name not in old:     # the machine's lock: a new entry of its own
        want["image"] = image or known[name].image   # `image` is given when `known` lacks it
        new = text + ("" if not text or text.endswith("\n") else "\n") + \
            f"{_quoted(name)}:\n  image: {_quoted(want['image'])}\n  digest: {_quoted(digest)}\n"
    else:
        lines = text.splitlines(keepends=True)
        inside, done = False, False
        for i, line in enumerate(lines):
            if not line.startswith((" ", "#", "\n")):
                inside = line.split(":")[0].strip().strip("'\"") == name
            elif inside and line.strip().startswith(("digest:", "image:")):
                field = line.strip().split(":", 1)[0]
                if field == "image" and image is None:
                    continue
                indent = line[: len(line) - len(line.lstrip())]
                lines[i] = f"{indent}{field}: {_quoted(digest if field == 'digest' else image)}\n"
                done = done or field == "digest"
        if not done:
            raise ExecutorError(f"{path}: entry {name!r} has no digest line to update")
        new = "".join(lines)
    try:
        after = pins.parse_lock(new, path, partial)
    except pins.LockError as e:
        raise ExecutorError(f"{path}: the pinned lock would not read back ({e}); nothing changed") from None
    if after != {**old, name: want}:
        raise ExecutorError(f"{path}: the pinned lock would not read back as written; nothing changed")
    atomic_write(path, new.encode())
    return (load_lock() if partial else load_lock(path))[name]


def _quoted(value: str) -> str:
    """A YAML scalar that reads back as `value`: plain when it is a safe reference, else double-quoted."""
    import yaml

    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/@:+-]*", value) and yaml.safe_load(value) == value
    return value if plain else json.dumps(value)


def squashfs_name(image: Image) -> str:
    """The local squashfs for an image, named by its digest so a re-pushed tag never goes stale.
    No ':' (a registry's port): pyxis and ch-run mount lists split on it."""
    if not image.pinned:
        raise ExecutorError(f"container {image.name!r} is not pinned: pin it before importing")
    repo = image.repository.replace("/", "+").replace(":", "+")
    return f"{repo}@sha256_{image.digest.split(':', 1)[1]}.sqsh"


def import_commands(image: Image, folder: Path, srun: bool = False) -> list[list[str]]:
    """`enroot import` into folder/<name by digest>.sqsh; on a login node, through srun on a compute node."""
    target = folder / squashfs_name(image)
    cmd = ["enroot", "import", "--output", str(target), f"docker://{image.pyxis}"]
    if srun:
        cmd = ["srun", "--nodes=1", "--ntasks=1", "--exclusive", *cmd]
    return [["mkdir", "-p", str(folder)], cmd]


def squashfs_for(image: Image, folder: Path | str, runtime: str = "charliecloud", echo=None) -> Path:
    """The squashfs of a pinned image in `folder`, imported first when missing: what a job's container
    runs. Safe when several jobs ask at once: one imports, the others wait for it and reuse its file."""
    return _ensure(image, folder, runtime, echo)[0]


def _ensure(image: Image, folder: Path | str, runtime: str, echo=None) -> tuple[Path, bool]:
    import fcntl
    import shutil

    if runtime not in RUNTIMES:
        raise ExecutorError(f"unknown container runtime {runtime!r} (one of: {', '.join(RUNTIMES)})")
    folder = Path(folder).expanduser()
    target = folder / squashfs_name(image)
    if target.is_file():
        return target, False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / f".{target.name}.lock", "a")
    except OSError as e:
        raise ExecutorError(f"cannot write the image folder {folder}: {e.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # a second importer waits here, then finds the file
        if target.is_file():
            return target, False
        for stale in folder.glob(f".{target.name}.*"):   # a killed importer's leftovers: only the lock holder writes them
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            elif stale.suffix == ".partial":
                stale.unlink(missing_ok=True)
        if echo:
            echo(f"importing {image.reference} with {runtime} into {folder} ...")
        (_import_charliecloud if runtime == "charliecloud" else _import_enroot)(image, target)
    return target, True


def _import_enroot(image: Image, target: Path) -> None:
    import shutil

    if not shutil.which("enroot"):
        raise ExecutorError("enroot is not installed on this machine: import on a node that has it "
                            "(`--srun`), print the commands (`--dry-run`), or use `--runtime charliecloud`")
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        _run(["enroot", "import", "--output", str(partial), f"docker://{image.pyxis}"], "enroot import", {})
        os.rename(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _import_charliecloud(image: Image, target: Path) -> None:
    """ch-image pull by digest into a storage of our own, check every byte it fetched against the pin,
    ch-convert to a squashfs beside the target, rename it into place."""
    import shutil
    import tempfile

    for tool in ("ch-image", "ch-convert", "mksquashfs"):
        if not shutil.which(tool, path=_tool_path()):
            raise ExecutorError(f"{tool} is not installed on this machine "
                                "(Debian: apt-get install charliecloud charliecloud-builders squashfs-tools squashfuse)")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        env = {"CH_IMAGE_STORAGE": str(work / "storage")}
        _run(["ch-image", "--no-cache", "pull", image.reference], "ch-image pull", env)
        check_pulled(work / "storage" / "dlcache", image)
        partial = work / "image.sqsh"
        _run(["ch-convert", "--tmp", str(work), "-i", "ch-image", "-o", "squash", image.reference, str(partial)],
             "ch-convert", env)
        os.chmod(partial, 0o644)
        os.rename(partial, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tool_path() -> str:
    # ch-image and ch-convert are Debian's python3 scripts (python3-lark): a virtual environment's
    # python3 first on PATH breaks them.
    return os.pathsep.join(["/usr/bin", "/bin", os.environ.get("PATH", "")])


def _run(cmd: list[str], what: str, env: dict) -> None:
    import subprocess

    import getpass

    full = {**os.environ, "PATH": _tool_path(), "USER": os.environ.get("USER") or getpass.getuser(), **env}
    full.pop("PYTHONPATH", None)
    full.pop("VIRTUAL_ENV", None)
    done = subprocess.run(cmd, env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise ExecutorError(f"{what} failed ({done.returncode}): {lines[-1] if lines else 'no output'}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _json(path: Path, image: Image) -> dict:
    try:
        value = json.loads(path.read_bytes())
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ExecutorError(f"{image.reference}: the registry's {path.name} is not a JSON object; nothing imported")
    return value


def check_pulled(dlcache: Path, image: Image) -> None:
    """Refuse what ch-image fetched unless it is the pinned image: the manifest (or the index that
    lists it) hashes to the pinned digest, and the config and every layer hash to what the manifest
    names. ch-image itself checks none of these."""
    fat = sorted(dlcache.glob("*.fat.json"))
    skinny = sorted(dlcache.glob("*.manifest.json"))
    if len(skinny) != 1:
        raise ExecutorError(f"ch-image pull of {image.reference} left {len(skinny)} manifests, expected 1")
    got = _sha256(skinny[0])
    if got != image.digest:
        top = _sha256(fat[0]) if fat else got
        if top != image.digest:
            raise ExecutorError(f"registry served other bytes for {image.reference}: its manifest is {top}, "
                                f"not the pinned {image.digest}; nothing imported")
        if got not in {m.get("digest") for m in _json(fat[0], image).get("manifests", [])}:
            raise ExecutorError(f"registry served other bytes for {image.reference}: manifest {got} is not "
                                "in the pinned index; nothing imported")
    manifest = _json(skinny[0], image)
    blobs = [(manifest.get("config") or {}).get("digest"), *(layer.get("digest") for layer in manifest.get("layers", []))]
    for i, digest in enumerate(blobs):
        if not digest or not DIGEST.match(digest):
            raise ExecutorError(f"manifest of {image.reference} names a blob without a sha256 digest: {digest!r}")
        path = dlcache / (digest.split(":", 1)[1] + (".json" if i == 0 else ".tar.gz"))
        if not path.is_file() or _sha256(path) != digest:
            raise ExecutorError(f"registry served other bytes for {image.reference}: "
                                f"{'config' if i == 0 else 'layer'} {digest} does not hash to its digest; nothing imported")


def command(action: str, name: str | None, digest: str | None = None, folder: str | None = None,
            srun: bool = False, dry_run: bool = False, runtime: str = "pyxis", image: str | None = None,
            echo=print) -> int:
    """`jobs containers list|pin|import`."""
    import shlex
    import subprocess

    if action == "list":
        for n, img in sorted(load_lock().items()):
            echo(f"{n:<10} {img.reference}" + ("" if img.pinned else "   (NOT PINNED)"))
        return 0
    if not name:
        raise ExecutorError(f"`jobs containers {action}` needs an image name (see `jobs containers list`)")
    if action == "pin":
        if not digest:
            raise ExecutorError("no registry is reachable from here: pass the digest, "
                                f"`jobs containers pin {name} --digest sha256:…` (from `skopeo inspect`)")
        echo(f"{name} pinned: {pin(name, digest, image=image).reference}")
        return 0
    if runtime not in RUNTIMES:
        raise ExecutorError(f"unknown container runtime {runtime!r} (one of: {', '.join(RUNTIMES)})")
    img = resolve(name)
    where = Path(folder or DEFAULT_DIRS[runtime]).expanduser()
    target = where / squashfs_name(img)
    if runtime == "pyxis" and (dry_run or srun):
        commands = import_commands(img, where, srun=srun)
        if dry_run:
            echo("\n".join(shlex.join(c) for c in commands))
            return 0
        if target.exists():
            echo(f"{target} already holds {img.reference}")
            return 0
        for c in commands:
            subprocess.run(c, check=True)
        echo(f"imported {img.reference} to {target}")
        return 0
    if dry_run or srun:
        raise ExecutorError("--dry-run and --srun go with --runtime pyxis (enroot import)")
    path, imported = _ensure(img, where, runtime, echo=echo)
    echo(f"imported {img.reference} to {path}" if imported else f"{path} already holds {img.reference}")
    return 0
