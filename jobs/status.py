"""Join what Slurm says (squeue, sacct) with what the store records, and record what only Slurm knows.

A job Slurm ended without the entry recording it (cancelled before start, killed by the time
limit, a dependency that can never be met) gets a status event saying why, so `jobs show` tells
the truth without anyone reading Slurm's logs.

A local run is a process on one host. Its attempt records host, PID, process group and the
process's start time; a run whose process is gone (same host, PID dead or now another process)
shows as LOST, computed when read, and `jobs cancel` signals only a process that still matches.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from jobs.errors import JobsError
from lineage import Store
from lineage.store import TERMINAL, RunView
from runtime.attempts import boot_id, proc_start

FAILED_STATES = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


@dataclass
class Live:
    """Slurm's view of one job."""

    state: str
    reason: str = ""
    exit_code: str = ""


def slurm_job(view: RunView) -> str | None:
    jobs = [e["job_id"] for e in view.jobs if e.get("executor") == "slurm"]
    return jobs[-1] if jobs else None


def query(job_ids: list[str]) -> dict[str, Live]:
    """squeue for jobs still queued or running (with the pending reason), sacct for the rest."""
    if not job_ids:
        return {}
    live: dict[str, Live] = {}
    ids = ",".join(job_ids)
    sq = subprocess.run(["squeue", "-h", "-j", ids, "-o", "%i|%T|%r"], capture_output=True, text=True)
    for line in sq.stdout.splitlines():
        jid, state, reason = (line.split("|") + ["", ""])[:3]
        live[jid] = Live(state, "" if reason in ("None", "(null)") else reason)
    rest = [j for j in job_ids if j not in live]
    if rest:
        sa = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(rest), "-o", "JobIDRaw,State,ExitCode,Reason"],
                            capture_output=True, text=True)
        for line in sa.stdout.splitlines():
            jid, state, code, reason = (line.split("|") + ["", "", ""])[:4]
            live[jid] = Live(state.split()[0], "" if reason in ("None", "(null)") else reason, code)
    return live


def reconcile(store: Store, view: RunView, live: Live | None) -> RunView:
    """Record an end that only Slurm saw. Returns the run's view afterwards."""
    if view.state in TERMINAL or live is None:
        return view
    reason = None
    if live.state == "CANCELLED":
        ups = sorted({ref["run"] for ref in view.spec.get("pending_inputs", {}).values()})
        failed = [u for u in ups if store.run(u).state in ("FAILED", "CANCELLED")]
        if failed:  # Slurm cancels a job whose afterok can never be met (kill_invalid_depend)
            reason = f"not run: upstream run {', '.join(failed)} did not succeed"
        else:
            reason = "cancelled in Slurm" + (f" ({live.reason})" if live.reason else "")
        store.add_event(view.id, "status", state="CANCELLED", reason=reason)
    elif live.state in FAILED_STATES:
        store.add_event(view.id, "status", state="FAILED", reason=f"Slurm ended the job: {live.state} exit {live.exit_code}")
    elif live.state == "COMPLETED":
        store.add_event(view.id, "status", state="FAILED", reason="the job ended without recording its outputs")
    else:
        return view
    return store.run(view.id)


def statuses(store: Store, run_ids: list[str]) -> list[tuple[RunView, Live | None]]:
    views = [store.run(r) for r in run_ids]
    live = query(sorted({j for v in views if v.state not in TERMINAL and (j := slurm_job(v))}))
    out = []
    for v in views:
        lv = live.get(slurm_job(v) or "")
        out.append((lost(reconcile(store, v, lv)), lv))
    return out


# ---- local processes ------------------------------------------------------------------------


def open_attempt(view: RunView) -> dict | None:
    """The local attempt that started and recorded no end: the process the run is waiting on."""
    if slurm_job(view) or view.state in TERMINAL:
        return None
    started = [a for a in view.attempts if a.get("pid") and not a.get("end")]
    return started[-1] if started else None


def process_problem(attempt: dict) -> str | None:
    """Why the recorded process is not (or cannot be shown to be) the one still running; None if it is."""
    host, pid = attempt.get("host"), attempt.get("pid")
    if host != socket.gethostname():
        return f"its process {pid} runs on host {host}, not here ({socket.gethostname()}): cancel it there"
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return f"its attempt records no usable process ID ({pid!r})"
    if attempt.get("proc_start") is None:
        return f"its attempt records no process start time, so PID {pid} cannot be told from a reused one"
    if attempt.get("boot_id") and boot_id() and attempt["boot_id"] != boot_id():
        return f"its process {pid} belonged to an earlier boot of {host}"
    now = proc_start(pid)
    if now is None:
        return f"its process {pid} on {host} is gone"
    if now != attempt["proc_start"]:
        return f"PID {pid} on {host} is now another process (started at tick {now}, the run's at {attempt['proc_start']})"
    return None


def _gone(attempt: dict) -> bool:
    """On this host and its process has ended (PID dead, or reused by another process)."""
    if attempt.get("host") != socket.gethostname() or attempt.get("proc_start") is None:
        return False
    if attempt.get("boot_id") and boot_id() and attempt["boot_id"] != boot_id():
        return True
    return proc_start(attempt["pid"]) != attempt["proc_start"]


def lost(view: RunView) -> RunView:
    """A local run whose process is gone without recording an end shows as LOST (nothing is written)."""
    attempt = open_attempt(view)
    if attempt is None or not _gone(attempt):
        return view
    spec = view.spec
    return replace(view, state="LOST", reason=(
        f"process {attempt['pid']} on {attempt['host']} is gone without recording an end; resubmit: "
        f"jobs submit {spec.get('recipe')} --stage {spec.get('stage')} --force, or jobs reproduce {view.id}"))


def cancel(store: Store, view: RunView) -> str:
    """scancel a Slurm run, or stop a local run's process group; then record CANCELLED.

    A local run is signalled only when its recorded process is still the one running here (host,
    PID, start time): otherwise JobsError, and nothing is signalled or recorded.
    """
    job = slurm_job(view)
    if job:
        # Recorded first, so whoever waits on the job reads CANCELLED, not a crash.
        store.add_event(view.id, "status", state="CANCELLED", reason="cancelled by user")
        subprocess.run(["scancel", job], check=True, capture_output=True)
        return f"scancel {job}"
    attempt = open_attempt(view)
    if attempt is None:
        if any(a.get("start") and not a.get("end") for a in view.attempts):
            raise JobsError(f"run {view.id} started but recorded no process to signal; nothing cancelled")
        store.add_event(view.id, "status", state="CANCELLED", reason="cancelled by user")
        return "not started yet"
    problem = process_problem(attempt)
    if problem:
        hint = "" if "cancel it there" in problem else (
            f"; resubmit: jobs submit {view.spec.get('recipe')} --stage {view.spec.get('stage')} --force")
        raise JobsError(f"run {view.id} not cancelled: {problem}; nothing signalled{hint}")
    pid, pgid = attempt["pid"], attempt.get("pgid")
    # The group the job made for itself (runtime.entry): only when the PID still leads it.
    group = pgid if pgid == pid and _pgid(pid) == pgid else None
    store.add_event(view.id, "status", state="CANCELLED", reason="cancelled by user")
    # submitit's job process ignores SIGTERM (it means "preempted" on Slurm): stop it for good.
    try:
        if group is not None:
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return f"SIGKILL to pid {pid} and its process group" if group is not None else f"SIGKILL to pid {pid}"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def table(store: Store, run: str | None = None, every: bool = False, limit: int = 200) -> list[str]:
    """`jobs status`: one run, or the newest `limit` runs not yet ended (`every`: ended ones too)."""
    if limit < 1:
        raise JobsError(f"--limit must be at least 1 (got {limit})")
    idx = store.index()
    if run:
        run_ids = [idx.resolve_run(run)]
    else:
        run_ids = [r["id"] for r in idx.runs(limit=limit) if every or r["state"] not in TERMINAL]
    lines = [f"{'RUN':<36}  {'STAGE':<9} {'STATE':<10} {'SLURM':<22} WHY"]
    for view, live in statuses(store, run_ids):
        job = slurm_job(view)
        slurm = f"{job} {live.state}" if job and live else (job or "local")
        why = (live.reason if live and live.reason else "") or (view.reason or "")
        lines.append(f"{view.id:<36}  {view.spec.get('stage', '?'):<9} {view.state:<10} {slurm:<22} {why}")
    return lines


def cancel_run(store: Store, run: str) -> str:
    """`jobs cancel`: refuse a run that already ended; else cancel it and say how."""
    view = store.run(store.index().resolve_run(run))
    if view.state in TERMINAL:
        raise JobsError(f"run {view.id} already ended: {view.state}")
    store.ensure_writable()
    return f"{view.id} cancelled ({cancel(store, view)})"
