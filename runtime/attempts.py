"""Why an attempt of a run ended, in words `jobs show` prints: preempted, time limit, node failure,
requeued by hand, error; and its failure class (lineage/failures.py).

An attempt that checkpointed on Slurm's USR2 records its reason and class itself (`stop`). One that
never recorded its end (the node died, `scontrol requeue`, the process was killed) is closed by the
next attempt (`close_interrupted`), with the reason sacct keeps for that instance of the job and the
class that record gets; runtime/entry.py then holds either against the run's retry budget.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from lineage.failures import Facts, classify

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


def slurm_output(*args: str) -> str:
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


def stop() -> tuple[str, str]:
    """Why this attempt was asked to stop, as (failure class, reason): Slurm's USR2 comes both
    before the time limit and on preemption; the time left tells them apart."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return "preempted", "asked to stop; requeued"
    left = _seconds(slurm_output("squeue", "-h", "-j", job, "-o", "%L"))
    if left is not None and left <= TIME_LIMIT_WINDOW_S:
        return "time_limit", f"time limit ({left:.0f} s left at USR2); requeued"
    return "preempted", "preempted (USR2 with time left); requeued"


#: sacct's fields of one ended instance of a job, as `slurm_facts` reads them.
SACCT_FIELDS = "JobIDRaw,State,ExitCode,DerivedExitCode,NodeList"


def parse_sacct(text: str) -> list[dict]:
    """`sacct -n -P -X -D -o SACCT_FIELDS` lines as {field: value}, oldest instance first, those
    still running or pending left out."""
    names = SACCT_FIELDS.split(",")
    rows = [dict(zip(names, line.split("|"))) for line in text.splitlines() if line.count("|") == len(names) - 1]
    return [r for r in rows if r["State"].strip()
            and r["State"].split()[0] not in ("RUNNING", "PENDING", "REQUEUED_HOLD", "RESIZING")]


def node_state(nodes: str) -> str | None:
    """The first node's state as Slurm sees it now (sinfo %T: idle, down*, drained...)."""
    first = nodes.split(",")[0].strip()
    if not first or first in ("None", "(null)") or "[" in first:
        return None
    out = slurm_output("sinfo", "-h", "-N", "-n", first, "-o", "%T").split()
    return out[0] if out else None


def slurm_facts(job_id: str) -> dict | None:
    """sacct's record of the last ended instance of a requeued job, with its node's state now."""
    ended = parse_sacct(slurm_output("sacct", "-n", "-P", "-X", "-D", "-j", str(job_id), "-o", SACCT_FIELDS))
    if not ended:
        return None
    last = ended[-1]
    return {**last, "node_state": node_state(last.get("NodeList", ""))}


def failure_facts(row: dict) -> Facts:
    """lineage.failures' facts from one sacct row (slurm_facts, parse_sacct)."""
    return Facts(state=row.get("State"), exit_code=row.get("ExitCode"),
                 derived_exit_code=row.get("DerivedExitCode"), node_state=row.get("node_state"))


def slurm_reason(job_id: str) -> str | None:
    """The state sacct recorded for the last ended instance of a requeued job, in words."""
    row = slurm_facts(job_id)
    if row is None:
        return None
    state = row["State"].split()[0]
    return SLURM_REASONS.get(state, state.lower())


def close_interrupted(store, view, now_attempt: int) -> list[str]:
    """Record the end of earlier attempts that never wrote one, with the best reason known and its
    failure class; returns those classes."""
    classes = []
    for a in view.attempts:
        if not a.get("start") or a.get("end") or "exit" in a or a["attempt"] >= now_attempt:
            continue
        reason, row = None, None
        if a.get("job_id") and os.environ.get("SLURM_JOB_ID"):
            row = slurm_facts(str(a["job_id"]).split("_")[0])
        if row is not None:
            state = row["State"].split()[0]
            reason = SLURM_REASONS.get(state, state.lower())
        # Nothing known (no Slurm, no accounting): a requeue that came without a word, the commonest.
        cls = classify(failure_facts(row)) if row is not None else "preempted"
        classes.append(cls)
        store.add_event(view.id, "attempt", attempt=a["attempt"], exit="interrupted", noticed=time.time(),
                        reason=reason or "ended without recording (killed, node lost or hard requeue)",
                        failure_class=cls, **({"slurm": row} if row is not None else {}))
    return classes


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
