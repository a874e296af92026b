"""What a run's job is really doing, joined with what the store records.

A job Slurm ended without the entry recording it (cancelled before start, killed by the time
limit, a dependency that can never be met) gets a status event saying why, so `jobs show` tells
the truth without anyone reading Slurm's logs.

What a Slurm run's ended attempts used (Elapsed, AllocTRES, MaxRSS, Submit and Start) is read from
sacct here too, once, and recorded on each attempt (`record_usage`; jobs/cost.py reads it).

A local run is a process on one host. Its attempt records host, PID, process group and the
process's start time; a run whose process is gone (same host, PID dead or now another process)
shows as LOST, computed when read.
"""
from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from lineage import Store
from lineage.states import TERMINAL, RunState
from lineage.store import RunView
from runtime.attempts import boot_id, proc_start

FAILED_STATES = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


@dataclass
class Live:
    """Slurm's view of one job."""

    state: str
    reason: str = ""
    exit_code: str = ""
    start: str = ""   # squeue %S: the expected start of a pending job (when Slurm has estimated one)


def slurm_job(view: RunView) -> str | None:
    jobs = [e["job_id"] for e in view.jobs if e.get("executor") == "slurm"]
    return jobs[-1] if jobs else None


def query(job_ids: list[str]) -> dict[str, Live]:
    """squeue for jobs still queued or running (with the pending reason), sacct for the rest."""
    if not job_ids:
        return {}
    live: dict[str, Live] = {}
    ids = ",".join(job_ids)
    # -r: one line per array task (a sweep's point is job "<array>_<task>"), never "<array>_[0-5%2]".
    sq = subprocess.run(["squeue", "-h", "-r", "-j", ids, "-o", "%i|%T|%r|%S"], capture_output=True, text=True)
    for line in sq.stdout.splitlines():
        jid, state, reason, start = (line.split("|") + ["", "", ""])[:4]
        live[jid] = Live(state, "" if reason in ("None", "(null)") else reason,
                         start="" if start in ("N/A", "Unknown", "(null)", "None") else start)
    rest = [j for j in job_ids if j not in live]
    if rest:
        sa = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(rest), "-o", "JobID,State,ExitCode,Reason"],
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
        ups = sorted({ref["run"] for ref in view.spec.pending_inputs.values()})
        failed = [u for u in ups if store.run(u).state in (RunState.FAILED, RunState.CANCELLED)]
        if failed:  # Slurm cancels a job whose afterok can never be met (kill_invalid_depend)
            reason = f"not run: upstream run {', '.join(failed)} did not succeed"
        else:
            reason = "cancelled in Slurm" + (f" ({live.reason})" if live.reason else "")
        store.add_event(view.id, "status", state=RunState.CANCELLED, reason=reason)
    elif live.state in FAILED_STATES or live.state == "COMPLETED":   # classified: jobs/triage.py
        from jobs.triage import record_slurm_failure

        record_slurm_failure(store, view, live.state, live.exit_code, slurm_job(view))
    elif live.state == "PENDING" and view.open_attempts() and "_" not in (job := slurm_job(view) or "_"):
        # Requeued by Slurm under a started attempt (the next one closes it and counts it against
        # the budget): when its node failed, keep the job off that node. (An array task's point: not here.)
        from jobs.triage import exclude_failed_nodes

        exclude_failed_nodes(job)
        return view
    else:
        return view
    return store.run(view.id)


def statuses(store: Store, run_ids: list[str]) -> list[tuple[RunView, Live | None]]:
    views = [store.run(r) for r in run_ids]
    live = query(sorted({j for v in views if v.state not in TERMINAL and (j := slurm_job(v))}))
    lives = [live.get(slurm_job(v) or "") for v in views]
    views = record_usage(store, [reconcile(store, v, lv) for v, lv in zip(views, lives)])
    return [(lost(v), lv) for v, lv in zip(views, lives)]


def record_usage(store: Store, views: list[RunView]) -> list[RunView]:
    """Each ended attempt of a Slurm run that holds no usage yet gets its job instance's accounting
    (jobs/cost.py parse_usage), from one sacct call for all of them; an instance sacct has not seen
    end yet is left for a later call. Someone who may only read the store records nothing (their
    `jobs show` stays a read; the attempts show `-` until a writer's call). Returns the views afterwards."""
    from jobs.cost import USAGE_FIELDS, instance_of, parse_usage
    from runtime.attempts import slurm_output

    need = [(v, a) for v in views if v.spec.executor == "slurm" for a in v.attempts
            if a.get("job_id") and "usage" not in a and ("exit" in a or a.get("end"))]
    if not need:
        return views
    jobs = sorted({str(a["job_id"]) for _, a in need})
    found = parse_usage(slurm_output("sacct", "-n", "-P", "-D", "-j", ",".join(jobs), "-o", USAGE_FIELDS))
    changed = set()
    for v, a in need:
        inst = instance_of(a, found.get(str(a["job_id"]), []))
        if inst is not None:
            try:
                store.add_event(v.id, "attempt", attempt=a["attempt"], usage=inst)
            except OSError:   # a store this user may read but not write
                break
            changed.add(v.id)
    return [store.run(v.id) if v.id in changed else v for v in views]


# ---- local processes ----------------------------------------------------------------------------


def open_attempt(view: RunView) -> dict | None:
    """The local attempt that started and recorded no end: the process the run is waiting on."""
    if slurm_job(view) or view.state in TERMINAL:
        return None
    started = [a for a in view.attempts if a.get("pid") and not a.get("end")]
    return started[-1] if started else None


def carries_run(pid: int, run_id: str) -> bool | None:
    """Whether process `pid` carries the run's identity: the run ID in its command line (a local
    job runs `python -m submitit.core._submit <store>/runs/<run>/logs`) or its environment. Host, PID,
    group, start time and boot are facts anyone can read and copy into a forged record; a process
    started for something else does not name the run. None when /proc cannot be read for it."""
    needle = run_id.encode()
    seen = False
    for part in ("cmdline", "environ"):
        try:
            data = Path(f"/proc/{pid}/{part}").read_bytes()
        except OSError:
            continue
        seen = True
        if any(needle in item for item in data.split(b"\0")):
            return True
    return False if seen else None


def process_problem(attempt: dict, run_id: str | None = None) -> str | None:
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
    if run_id is not None:
        carries = carries_run(pid, run_id)
        if carries is None:
            return f"process {pid} on {host} cannot be shown to be the run's (its /proc entries are not readable)"
        if not carries:
            return (f"process {pid} on {host} does not carry run {run_id} in its command line or environment: "
                    "it is not the run's job")
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
    return replace(view, state=RunState.LOST, reason=(
        f"process {attempt['pid']} on {attempt['host']} is gone without recording an end; resubmit: "
        f"jobs submit {spec.recipe} --stage {spec.stage} --force, or jobs reproduce {view.id}"))
