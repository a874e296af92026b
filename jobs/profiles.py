"""Cluster profiles: where and how a user's jobs run, kept in a YAML file, like Nemotron's env.toml.

    # ~/.config/jobs/profiles.yaml   (or $JOBS_PROFILES)
    default:
      partition: debug
      account: ci
      time: "01:00:00"
    big:
      extends: default
      nodes: 2
      gpus_per_node: 8
      sbatch: {mail-type: END}
      srun_args: ["--cpu-bind=none"]
    dev:
      partition: debug
      containers: false      # no pyxis here: stages run in this Python environment

A profile's values override the recipe's resources for the stage.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from jobs.errors import ExecutorError

PROFILES_FILE = "~/.config/jobs/profiles.yaml"


@dataclass(frozen=True)
class Profile:
    name: str = "default"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | int | None = None          # Slurm time ("1-00:00:00", "90", "02:00:00") or minutes
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    constraint: str | None = None
    exclusive: bool | None = None
    sbatch: dict = field(default_factory=dict)       # extra #SBATCH --key=value
    srun_args: list = field(default_factory=list)    # extra srun arguments
    container_mounts: list = field(default_factory=list)
    containers: bool = True                          # false on clusters without pyxis: run on the host
    store: str | None = None


KEYS = {f.name for f in fields(Profile)} - {"name"}


def profiles_path() -> Path:
    return Path(os.environ.get("JOBS_PROFILES", PROFILES_FILE)).expanduser()


def load(name: str | None) -> Profile:
    """The named profile (with `extends` applied); no name and no file give an empty default."""
    path = profiles_path()
    raw = yaml.safe_load(path.read_text()) if path.is_file() else {}
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ExecutorError(f"{path}: expected a mapping of profile names")
    if name is None:
        name = "default"
        if name not in raw:
            return Profile()
    if name not in raw:
        known = ", ".join(sorted(raw)) or "none"
        raise ExecutorError(f"no profile {name!r} in {path} (profiles: {known})")
    merged: dict = {}
    chain, cur = [], name
    while cur is not None:
        if cur in chain:
            raise ExecutorError(f"{path}: profile {name!r} extends itself through {' -> '.join(chain)}")
        if cur not in raw:
            raise ExecutorError(f"{path}: profile {chain[-1]!r} extends unknown profile {cur!r}")
        chain.append(cur)
        cur = (raw[cur] or {}).get("extends")
    for link in reversed(chain):
        merged.update({k: v for k, v in (raw[link] or {}).items() if k != "extends"})
    unknown = sorted(set(merged) - KEYS)
    if unknown:
        raise ExecutorError(f"{path}: profile {name!r} has unknown keys {unknown} (valid: {', '.join(sorted(KEYS))})")
    if merged.get("time") is not None:
        minutes(merged["time"])
    return Profile(name=name, **merged)


_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def minutes(value: str | int) -> int:
    """Slurm's time formats -> whole minutes (rounded up, as Slurm does)."""
    if isinstance(value, int):
        if value <= 0:
            raise ExecutorError(f"time {value} must be positive")
        return value
    m = _TIME.match(str(value).strip())
    if not m:
        raise ExecutorError(f"time {value!r} is not a Slurm time (MM, HH:MM:SS, D-HH, D-HH:MM:SS)")
    d, a, b, c = (int(x) if x else None for x in m.group("d", "a", "b", "c"))
    if d is not None:   # D-HH[:MM[:SS]]
        secs = d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        secs = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        secs = a * 60 + b
    else:                # MM
        secs = a * 60
    if secs <= 0:
        raise ExecutorError(f"time {value!r} must be positive")
    return -(-secs // 60)
