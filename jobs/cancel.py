"""`jobs cancel`: scancel a Slurm run, or stop a local run's process group, and record CANCELLED.

`cancel` signals only a local process that still matches the run's attempt (host, PID, start
time) and carries the run's ID in its command line or environment (jobs.reconcile).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from jobs.errors import JobsError
from jobs.reconcile import open_attempt, process_problem, slurm_job
from lineage import Store
from lineage.states import TERMINAL, RunState
from lineage.store import RunView


def close_attempts(store: Store, view: RunView, reason: str = "cancelled by user") -> None:
    """A cancelled attempt gets its end now: the killed process never writes one, and `jobs show`
    would list it as running."""
    for a in view.open_attempts():
        store.add_event(view.id, "attempt", attempt=a["attempt"], end=time.time(), exit="cancelled", reason=reason)


def cancel(store: Store, view: RunView, reason: str = "cancelled by user") -> str:
    """scancel a Slurm run, or stop a local run's process group; then record CANCELLED.

    A local run is signalled only when its recorded process is still the one running here (host,
    PID, start time): otherwise JobsError, and nothing is signalled or recorded.
    """
    job = slurm_job(view)
    if job:
        # Recorded only once scancel took it: a job another user owns (or one Slurm no longer knows)
        # is refused in one line and the store keeps saying what runs. scancel sends SIGTERM, which
        # the job's submitit handler does not end on, so it records nothing of its own meanwhile.
        done = subprocess.run(["scancel", job], capture_output=True, text=True)
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        if done.returncode or said:   # scancel reports some refusals (not the owner) with exit 0
            raise JobsError(f"run {view.id} not cancelled: scancel {job} said "
                            f"{said[-1] if said else f'nothing (exit {done.returncode})'}; nothing recorded")
        store.add_event(view.id, "status", state=RunState.CANCELLED, reason=reason)
        close_attempts(store, view, reason)
        return f"scancel {job}"
    attempt = open_attempt(view)
    if attempt is None:
        if any(a.get("start") and not a.get("end") for a in view.attempts):
            raise JobsError(f"run {view.id} started but recorded no process to signal; nothing cancelled")
        store.add_event(view.id, "status", state=RunState.CANCELLED, reason=reason)
        return "not started yet"
    problem = process_problem(attempt, view.id)
    if problem:
        hint = "" if "cancel it there" in problem else (
            f"; resubmit: jobs submit {view.spec.recipe} --stage {view.spec.stage} --force")
        raise JobsError(f"run {view.id} not cancelled: {problem}; nothing signalled{hint}")
    pid, pgid = attempt["pid"], attempt.get("pgid")
    # The group the job made for itself (runtime.entry): only when the PID still leads it.
    group = pgid if pgid == pid and _pgid(pid) == pgid else None
    store.add_event(view.id, "status", state=RunState.CANCELLED, reason=reason)
    # submitit's job process ignores SIGTERM (it means "preempted" on Slurm): stop it for good.
    try:
        if group is not None:
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    close_attempts(store, view, reason)
    said = f"SIGKILL to pid {pid} and its process group" if group is not None else f"SIGKILL to pid {pid}"
    if view.spec.ray and attempt.get("job_id"):
        from runtime.ray_cluster import reap

        killed = reap(str(attempt["job_id"]), attempt["host"])
        said += f", and to the {len(killed)} processes of its Ray cluster" if killed else ""
    return said


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def cancel_run(store: Store, run: str) -> str:
    """`jobs cancel`: refuse a run that already ended; else cancel it and say how."""
    view = store.run(store.index().resolve_run(run))
    if view.state in TERMINAL:
        raise JobsError(f"run {view.id} already ended: {view.state}")
    store.ensure_writable()
    return f"{view.id} cancelled ({cancel(store, view)})"
