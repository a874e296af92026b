"""Why an attempt of a run ended, in words `jobs show` prints: preempted, time limit, node failure,
requeued by hand, error.

An attempt that checkpointed on Slurm's USR2 records its reason itself (`stop_reason`). One that
never recorded its end (the node died, `scontrol requeue`, the process was killed) is closed by the
next attempt (`close_interrupted`), with the reason sacct keeps for that instance of the job.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

#: sacct states of a requeued job's earlier instances, in words.
SLURM_REASONS = {"PREEMPTED": "preempted", "TIMEOUT": "time limit", "NODE_FAIL": "node failure",
                 "REQUEUED": "requeued (scontrol requeue)", "BOOT_FAIL": "node failure (boot)",
                 "CANCELLED": "cancelled", "FAILED": "error", "OUT_OF_MEMORY": "out of memory"}
#: Slurm sends USR2 this long before the time limit (the Slurm executor asks for `--signal=USR2@90`;
#: a recipe may set `signal_delay_s`).
USR2_LEAD_S = 90
#: The one grace period: how long the job lets its stage checkpoint after USR2 before it requeues.
#: The lead less 15 s, so the requeue and the process exit still happen before Slurm's kill.
STOP_GRACE_S = USR2_LEAD_S - 15
#: Set by the batch script's first line to its epoch time (seconds, sub-second): the attempt's `batch_start`.
BATCH_START_ENV = "JOBS_BATCH_START"
#: A USR2 with at most this much time left came for the time limit, not a preemption (the lead plus
#: slack for squeue's view of the time left).
TIME_LIMIT_WINDOW_S = USR2_LEAD_S + 60


def _slurm(*args: str) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _seconds(left: str) -> float | None:
    """squeue's %L ([days-]hours:minutes:seconds, or minutes:seconds) in seconds."""
    days, _, hms = left.strip().rpartition("-")
    try:
        parts = [int(x) for x in hms.split(":")]
    except ValueError:
        return None  # UNLIMITED, INVALID, empty
    total = 0
    for p in parts:
        total = total * 60 + p
    return total + (int(days) * 86400 if days else 0)


def stop_reason() -> str:
    """Why this attempt was asked to stop: Slurm's USR2 comes both before the time limit and on
    preemption; the time left tells them apart."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return "asked to stop; requeued"
    left = _seconds(_slurm("squeue", "-h", "-j", job, "-o", "%L"))
    if left is not None and left <= TIME_LIMIT_WINDOW_S:
        return f"time limit ({left:.0f} s left at USR2); requeued"
    return "preempted (USR2 with time left); requeued"


def slurm_reason(job_id: str) -> str | None:
    """The state sacct recorded for the last ended instance of a requeued job, in words."""
    states = [line.split("|")[1].split()[0] for line in
              _slurm("sacct", "-n", "-P", "-X", "-D", "-j", str(job_id), "-o", "JobIDRaw,State").splitlines()
              if line.count("|") == 1 and line.split("|")[1].strip()]
    ended = [s for s in states if s not in ("RUNNING", "PENDING", "REQUEUED_HOLD", "RESIZING")]
    return SLURM_REASONS.get(ended[-1], ended[-1].lower()) if ended else None


def close_interrupted(store, view, now_attempt: int) -> None:
    """Record the end of earlier attempts that never wrote one, with the best reason known."""
    for a in view.attempts:
        if not a.get("start") or a.get("end") or "exit" in a or a["attempt"] >= now_attempt:
            continue
        reason = None
        if a.get("job_id") and os.environ.get("SLURM_JOB_ID"):
            reason = slurm_reason(str(a["job_id"]).split("_")[0])
        store.add_event(view.id, "attempt", attempt=a["attempt"], exit="interrupted", noticed=time.time(),
                        reason=reason or "ended without recording (killed, node lost or hard requeue)")


def proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (/proc/<pid>/stat field 22); None if no
    such process, or it is a zombie (it has ended; only its parent has not reaped it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()   # the name (field 2) may hold spaces and ')'
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
