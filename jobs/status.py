"""Join what Slurm says (squeue, sacct) with what the store records, and record what only Slurm knows.

A job Slurm ended without the entry recording it (cancelled before start, killed by the time
limit, a dependency that can never be met) gets a status event saying why, so `jobs show` tells
the truth without anyone reading Slurm's logs.
"""
from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

from lineage import Store
from lineage.store import TERMINAL, RunView

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
        out.append((reconcile(store, v, lv), lv))
    return out


def cancel(store: Store, view: RunView) -> str:
    """scancel a Slurm run, or stop a local run's process; then record CANCELLED."""
    # Recorded first, so whoever waits on the job reads CANCELLED, not a crash.
    store.add_event(view.id, "status", state="CANCELLED", reason="cancelled by user")
    job = slurm_job(view)
    if job:
        subprocess.run(["scancel", job], check=True, capture_output=True)
        return f"scancel {job}"
    # submitit's job process ignores SIGTERM (it means "preempted" on Slurm): stop it for good.
    pids = [a["pid"] for a in view.attempts if a.get("pid") and not a.get("end")]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return f"SIGKILL to pid {', '.join(map(str, pids))}" if pids else "not started yet"
