"""A failed attempt's class, from the login node: what only Slurm saw, and the `--failed` filter.

The job records the class of an end it lives to see (runtime/entry.py). An end it never saw (killed
at the time limit, its node lost, killed for memory) is noticed by `jobs status` (jobs/status.py
reconcile): here it is classified (lineage/failures.py) from sacct's State, ExitCode and
DerivedExitCode, the node's state now, and the last lines of the job's stderr, and recorded on the
open attempt and in the run's FAILED reason. A local job process that died without a word is
classified the same way by the local executor (`record_local_death`).
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace

from lineage import Store
from lineage.failures import Facts, classify
from lineage.states import RunState
from lineage.store import RunView

#: Bytes read from the end of the job's stderr for its last lines.
LOG_TAIL = 16 << 10


def log_tail(store: Store, view: RunView, lines: int = 20) -> tuple[str, ...]:
    """The last non-blank lines of the current attempt's stderr (none when there is no such file)."""
    from jobs.logfiles import current_job, log_folder, log_paths
    from lineage.records import open_regular

    job, _ = current_job(view)
    if not job:
        return ()
    try:
        f = open_regular(log_paths(log_folder(store, view), job)[1])
    except OSError:
        return ()
    if f is None:
        return ()
    with f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - LOG_TAIL))
        text = f.read().decode(errors="replace")
    return tuple(line.strip() for line in text.splitlines() if line.strip())[-lines:]


#: sacct's fields of a job's steps (its latest instance), for the signal that ended a step.
STEP_FIELDS = "JobID,State,ExitCode"


def step_signal(steps: str) -> int | None:
    """The signal that ended one of the job's steps (`sacct -n -P -j JOB -o STEP_FIELDS`), e.g. 9
    for an srun task the kernel killed; None when none was."""
    found = []
    for line in steps.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and "." in parts[0]:
            sig = parts[2].partition(":")[2]
            found += [int(sig)] if sig.isdigit() and int(sig) else []
    return max(found) if found else None


def facts_of(sacct: str, steps: str, log: tuple[str, ...], node_state: str | None = None) -> Facts:
    """What Slurm kept of a job's latest ended instance (runtime.attempts.SACCT_FIELDS lines with
    -X -D; its steps' STEP_FIELDS lines) and its log's last lines, as lineage/failures.py's Facts."""
    from runtime.attempts import failure_facts, parse_sacct

    ended = parse_sacct(sacct)
    row = {**(ended[-1] if ended else {}), "node_state": node_state}
    facts = failure_facts(row)
    return replace(facts, signal=step_signal(steps), log_tail=tuple(log))


def slurm_failure(store: Store, view: RunView, state: str, exit_code: str, job: str | None) -> tuple[str, str]:
    """(class, reason) of a Slurm job that ended without the entry recording it."""
    from runtime.attempts import SACCT_FIELDS, node_state, parse_sacct, slurm_output

    sacct = slurm_output("sacct", "-n", "-P", "-X", "-D", "-j", job, "-o", SACCT_FIELDS) if job else ""
    steps = slurm_output("sacct", "-n", "-P", "-j", job, "-o", STEP_FIELDS) if job else ""
    ended = parse_sacct(sacct)
    facts = facts_of(sacct, steps, log_tail(store, view), node_state(ended[-1]["NodeList"]) if ended else None)
    if not facts.state:   # sacct has not heard of the end yet: squeue's word for it
        facts = replace(facts, state=state, exit_code=exit_code)
    cls = classify(facts)
    if state == "COMPLETED":
        return cls, f"{cls}: the job ended without recording its outputs"
    return cls, f"{cls}: Slurm ended the job: {state} exit {exit_code}"


def exclude_failed_nodes(job: str) -> list[str]:
    """A job Slurm requeued after its node failed goes to another: that instance's nodes join the
    pending job's ExcNodeList (scontrol takes it only while the job pends; a node set down is not
    scheduled anyway, but one that comes back, ReturnToService, would be). Returns the nodes added."""
    from runtime.attempts import failure_facts, slurm_facts, slurm_output

    facts = slurm_facts(job)
    if facts is None or classify(failure_facts(facts)) != "node_failure":
        return []
    failed = [n for n in facts.get("NodeList", "").split(",") if n.strip() and n not in ("None", "(null)")]
    shown = dict(w.split("=", 1) for w in slurm_output("scontrol", "show", "job", "-o", job).split() if "=" in w)
    have = [n for n in shown.get("ExcNodeList", "").split(",") if n and n != "(null)"]
    new = [n for n in failed if n not in have]
    if new and shown.get("JobState") == "PENDING":
        done = subprocess.run(["scontrol", "update", f"JobId={job}", f"ExcNodeList={','.join(have + new)}"],
                              capture_output=True, text=True)
        return new if done.returncode == 0 else []
    return []


def record_slurm_failure(store: Store, view: RunView, state: str, exit_code: str, job: str | None) -> None:
    """The run FAILED with its class, and its open attempt closed with it."""
    cls, reason = slurm_failure(store, view, state, exit_code, job)
    close_open_attempts(store, view, cls, f"Slurm ended the job: {state}")
    store.add_event(view.id, "status", state=RunState.FAILED, reason=reason, failure_class=cls)


def local_death(returncode: int | None, log: tuple[str, ...]) -> tuple[str, str]:
    """(class, reason) of a local job process that ended without recording its end: the signal
    that killed it (a negative return code) and its stderr's last lines."""
    sig = -returncode if returncode is not None and returncode < 0 else None
    code = f"{returncode}:0" if returncode is not None and returncode > 0 else None
    cls = classify(Facts(signal=sig, exit_code=code, log_tail=log))
    # submitit's local controller keeps no exit status of the task it ran: often nothing tells why.
    how = f" (signal {sig})" if sig else f" (exit {returncode})" if code else "" if log else " (nothing it left says why)"
    return cls, f"{cls}: the job process died before recording an end{how}"


def record_local_death(store: Store, view: RunView, job) -> None:
    """A local run whose process (submitit's LocalJob `job`) died without a word: FAILED with its class."""
    process = getattr(job, "_process", None)
    returncode = process.poll() if process is not None else None
    try:
        with open(job.paths.stderr, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL))
            log = tuple(x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip())[-20:]
    except OSError:
        log = ()
    cls, reason = local_death(returncode, log)
    close_open_attempts(store, view, cls, reason.split(": ", 1)[1])
    store.add_event(view.id, "status", state=RunState.FAILED, reason=reason, failure_class=cls)


def close_open_attempts(store: Store, view: RunView, cls: str, reason: str) -> None:
    """Each attempt that started and recorded no end ends now, with the class of the failure."""
    for a in view.open_attempts():
        store.add_event(view.id, "attempt", attempt=a["attempt"], exit="interrupted", noticed=time.time(),
                        reason=reason, failure_class=cls)


def attempts_note(view: RunView) -> str:
    """`jobs status`'s words for the failed attempts: "attempts: #1 preempted, #2 time_limit" ("" if none)."""
    failed = [f"#{a['attempt']} {a['failure_class']}" for a in view.attempts if a.get("failure_class")]
    return f"attempts: {', '.join(failed)}" if failed else ""


def failed_runs(idx, cls: str, recipe: str | None = None, stage: str | None = None,
                limit: int | None = None) -> list:
    """FAILED runs whose failure (the status event that set the state) is of class `cls`, newest first."""
    return idx.runs(recipe, stage, limit, failure_class=cls)
