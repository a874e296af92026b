"""The container images stages run in, pinned by digest in containers.lock beside this file.

A Slurm run names its image by digest, never by tag: a re-pushed tag cannot silently change what a
recorded run used. This module only reads the pins; `jobs containers` (jobs/containers.py) writes them.

`JOBS_CONTAINERS_LOCK` names a second lock whose entries replace the committed ones, key by key: a
machine's own pins (the dev registry's image, rebuilt on every fresh set-up with a new digest) live
there instead of in the committed file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

LOCK = Path(__file__).resolve().parent / "containers.lock"
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
    def repository(self) -> str:
        """registry/repo without the tag."""
        return self.image.rsplit(":", 1)[0] if _has_tag(self.image) else self.image

    @property
    def reference(self) -> str:
        """registry/repo@sha256:… when pinned, else registry/repo:tag."""
        return f"{self.repository}@{self.digest}" if self.pinned else self.image

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


def override() -> Path | None:
    """The machine's own lock from $JOBS_CONTAINERS_LOCK, if set."""
    value = os.environ.get("JOBS_CONTAINERS_LOCK")
    return Path(value) if value else None


class LockError(ValueError):
    """A lock that does not read as a mapping of image names to entries: one line, nothing used from it."""


def parse_lock(text: str, where: Path | str, partial: bool = False) -> dict[str, dict]:
    """The one reading of a lock's text: a mapping of image names, each entry a mapping with a
    non-empty `image` string, an optional `digest` string and `libraries` mapping. Plain YAML only
    (a `!!python` tag is refused, never built). `partial`: a machine's lock, whose entry may leave
    `image` to the committed entry it is laid over."""
    import yaml

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())[:200]
        raise LockError(f"{where}: not valid YAML{at}: {problem}") from None
    if raw is None:
        return {}
    if isinstance(raw, dict) and set(raw) == {"images"}:
        raw = raw["images"] or {}
    if not isinstance(raw, dict):
        raise LockError(f"{where}: expected a mapping of image names to entries, got a {type(raw).__name__}")
    entries: dict[str, dict] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not name:
            raise LockError(f"{where}: image name {name!r} is not a string")
        if not isinstance(entry, dict):
            raise LockError(f"{where}: entry {name!r} must be a mapping with image: and digest:, "
                            f"not a {type(entry).__name__}")
        for key, want in (("image", str), ("digest", (str, type(None))), ("libraries", (dict, type(None)))):
            if key == "image" and partial and key not in entry:
                continue
            if not isinstance(entry.get(key), want):
                raise LockError(f"{where}: entry {name!r}: "
                                + (f"{key} is missing" if key not in entry else f"{key} must be a "
                                   + {"image": "string", "digest": "string or null", "libraries": "mapping"}[key]))
        if "image" in entry and not entry["image"].strip():
            raise LockError(f"{where}: entry {name!r}: image is empty")
        entries[name] = dict(entry)
    return entries


def _entries(path: Path, partial: bool = False) -> dict[str, dict]:
    if not path.is_file():
        return {}
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LockError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    return parse_lock(text, path, partial)


def load_lock(path: Path | None = None) -> dict[str, Image]:
    """The pins of one lock file; without `path`, the committed lock with $JOBS_CONTAINERS_LOCK's
    entries laid over it (their keys win, the committed keys they do not name stay)."""
    if path is not None:
        entries = _entries(path)
    else:
        entries = _entries(LOCK)
        extra = override()
        for name, entry in (_entries(extra, partial=True) if extra else {}).items():
            entries[name] = {**entries.get(name, {}), **entry}
            if "image" not in entries[name]:   # neither lock says which image
                raise LockError(f"{extra}: entry {name!r}: image is missing (the committed lock has no {name!r})")
    return {name: Image(name, entry["image"], entry.get("digest") or None, dict(entry.get("libraries") or {}))
            for name, entry in entries.items()}
