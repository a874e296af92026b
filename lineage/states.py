"""A run's states. The record holds them as strings (the enum's values); a run's state is the last
one its events name, except that CANCELLED is final."""
from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    QUEUED = "QUEUED"         # recorded; waiting for a process, a node, or its upstream
    RUNNING = "RUNNING"       # the job started the stage
    SUCCEEDED = "SUCCEEDED"   # outputs registered
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"   # by the user, or because an upstream run did not succeed
    LOST = "LOST"             # shown, never recorded: a local run whose process is gone without an end


TERMINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
