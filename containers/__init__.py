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

import yaml

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


def _entries(path: Path) -> dict[str, dict]:
    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text()) or {}
    return dict(raw.get("images", raw))


def load_lock(path: Path | None = None) -> dict[str, Image]:
    """The pins of one lock file; without `path`, the committed lock with $JOBS_CONTAINERS_LOCK's
    entries laid over it (their keys win, the committed keys they do not name stay)."""
    if path is not None:
        entries = _entries(path)
    else:
        entries = _entries(LOCK)
        extra = override()
        for name, entry in (_entries(extra) if extra else {}).items():
            entries[name] = {**entries.get(name, {}), **entry}
    return {name: Image(name, entry["image"], entry.get("digest") or None, dict(entry.get("libraries") or {}))
            for name, entry in entries.items()}
