"""Executors turn recorded runs into processes: `local` (submitit's local executor), later `slurm`."""
from __future__ import annotations

from jobs.errors import ExecutorError

NAMES = ("local",)


def get(name: str):
    if name == "local":
        from jobs.executors.local import LocalExecutor

        return LocalExecutor()
    raise ExecutorError(f"unknown executor {name!r} (executors: {', '.join(NAMES)})")
