"""Executors turn recorded runs into processes: `local` (submitit's LocalExecutor) and `slurm`.

Each implements `Executor`; jobs/submit.py drives every one the same way: prepare (validate,
before anything is recorded) -> record -> launch. `launch` is given every run a submission recorded
and decides how to run them from their records: a chain in order, each after the runs it takes
inputs from; the points of one sweep as independent runs (on Slurm: one job array).
"""
from __future__ import annotations

from jobs.executors.base import Executor, Prepared

__all__ = ["NAMES", "Executor", "Prepared", "get"]

NAMES = ("local", "slurm")


def get(name: str, profile=None, allow_unpinned: bool = False) -> Executor:
    """The executor called `name`; a Slurm executor needs the cluster profile."""
    from jobs.errors import ExecutorError

    if name == "local":
        from jobs.executors.local import LocalExecutor

        return LocalExecutor()
    if name == "slurm":
        from jobs.executors.slurm import SlurmExecutor, SlurmTarget

        return SlurmExecutor(SlurmTarget(profile, allow_unpinned=allow_unpinned))
    raise ExecutorError(f"unknown executor {name!r} (executors: {', '.join(NAMES)})")
