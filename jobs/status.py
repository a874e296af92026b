"""Join what Slurm says (squeue, sacct) with what the store records, and record what only Slurm knows.

A job Slurm ended without the entry recording it (cancelled before start, killed by the time
limit, a dependency that can never be met) gets a status event saying why, so `jobs show` tells
the truth without anyone reading Slurm's logs.

A local run is a process on one host. Its attempt records host, PID, process group and the
process's start time; a run whose process is gone (same host, PID dead or now another process)
shows as LOST, computed when read, and `jobs cancel` signals only a process that still matches
and carries the run's ID in its command line or environment.

`rows` is what `jobs status` prints: for a running run, where its training stands (the stage's
progress.json, else the last loss in metrics.jsonl); for a pending Slurm job, Slurm's reason and
expected start. `follow_logs` is `jobs logs [-f]`: the current attempt's job output only.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from jobs.errors import JobsError
from lineage import Store
from lineage.layout import RunDir
from lineage.records import strict_json
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


# ---- what `jobs status` prints ------------------------------------------------------------------
#: squeue's pending reasons, in words (the common ones; any other is shown as Slurm spells it).
PENDING_WORDS = {
    "Dependency": "waits for its upstream job", "BeginTime": "its --begin time has not come",
    "Resources": "waits for free nodes", "Priority": "jobs of higher priority go first",
    "DependencyNeverSatisfied": "its upstream job failed: it will never start",
    "ReqNodeNotAvail": "a requested node is not available", "JobHeldUser": "held (scontrol release)",
    "JobHeldAdmin": "held by an administrator", "PartitionDown": "its partition is down",
    "QOSMaxJobsPerUserLimit": "the QOS allows no more running jobs for this user",
    "JobArrayTaskLimit": "its sweep's --max-parallel points are running",
}
METRICS_TAIL = 64 << 10   # bytes read from the end of metrics.jsonl


@dataclass
class Row:
    """One line of `jobs status`."""

    run: str
    stage: str
    state: str
    slurm: str = "local"            # "<job> <squeue/sacct state>", or "local"
    step: int | None = None         # training progress of a running run
    total: int | None = None
    loss: float | None = None
    eta_s: float | None = None
    why: str = ""                   # Slurm's pending reason and expected start, or the record's reason
    extra: dict | None = None       # the stage's own progress fields (rl: reward; rm: train_accuracy)


def open_regular(path: Path):
    """`path` opened for reading if it is a regular file, else None: a FIFO, device or symbolic link
    planted in a run folder is never followed and never blocks the reader (O_NONBLOCK, then fstat).
    FileNotFoundError when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError:
        return None   # a link (ELOOP), or nothing we may read
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return open(fd, "rb")


def _read_text(path: Path, limit: int = 1 << 20) -> str:
    f = open_regular(path)
    if f is None:
        raise OSError(f"{path} is not a regular file")
    with f:
        return f.read(limit).decode("utf-8", "replace")


def read_progress(run_dir: Path, attempt: int, now: float) -> dict:
    """{step, total, loss, eta_s} of a running stage: its progress.json (stages.ml.tracking.Progress),
    else the last line of metrics.jsonl with a loss. The ETA counts down from when it was written,
    and only the attempt that wrote it has one."""
    try:
        p = json.loads(_read_text(RunDir(run_dir).progress))
        eta = p.get("eta_s")
        if eta is not None and p.get("attempt") == attempt:
            eta = max(0.0, eta - (now - p["time"]))
        else:
            eta = None
        extra = p.get("extra") if isinstance(p.get("extra"), dict) and p.get("extra") else None
        return {"step": p["step"], "total": p["total"], "loss": p["loss"], "eta_s": eta, **({"extra": extra} if extra else {})}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        f = open_regular(RunDir(run_dir).metrics)
        if f is None:
            return {}
        with f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - METRICS_TAIL))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        loss = [v for k, v in row.items() if k.endswith("/loss") and isinstance(v, (int, float))] if isinstance(row, dict) else []
        if loss:
            return {"step": row.get("step"), "loss": loss[0]}
    return {}


def pending_why(live: Live) -> str:
    """'Dependency (waits for its upstream job); expected start 2026-…' from squeue's %r and %S."""
    words = PENDING_WORDS.get(live.reason)
    why = f"{live.reason} ({words})" if words else (live.reason or "pending")
    return why + ("; expected start " + live.start if live.start else "; no start time estimated yet")


def rows(store: Store, run_ids: list[str], now: float | None = None) -> list[Row]:
    """Each run joined with Slurm (recording ends only Slurm saw), with its progress when running."""
    from jobs.triage import attempts_note

    now = time.time() if now is None else now
    out = []
    for view, live in statuses(store, run_ids):
        job = slurm_job(view)
        row = Row(view.id, view.spec.stage or "?", view.state,
                  f"{job} {live.state}" if job and live else (job or "local"),
                  why=(live.reason if live and live.reason else "") or (view.reason or ""))
        if live is not None and live.state == "PENDING" and view.state not in TERMINAL:
            row.why = pending_why(live)
        note = attempts_note(view)   # each failed attempt's class (jobs/triage.py)
        if note:
            row.why = f"{row.why}; {note}" if row.why else note
        if view.state == RunState.FAILED:
            said = last_error_line(store, view)
            if said and said not in row.why:
                row.why = f"{row.why}; log: {said}" if row.why else f"log: {said}"
        if view.state == RunState.RUNNING:
            attempt = sum(1 for a in view.attempts if a.get("start"))
            for k, v in read_progress(store.run_dir(view.id), attempt, now).items():
                setattr(row, k, v)
        out.append(row)
    return out


def format_rows(table: list[Row]) -> list[str]:
    """The table `jobs status` prints, header first."""
    from stages.ml.tracking import duration

    lines = [f"{'RUN':<36}  {'STAGE':<9} {'STATE':<10} {'SLURM':<22} {'PROGRESS':<34} WHY"]
    for r in table:
        progress = ""
        if r.step is not None:
            progress = f"{r.step}/{r.total if r.total else '?'}"
            if r.loss is not None:
                progress += f" loss {r.loss:.4f}"
            for k, v in list((r.extra or {}).items())[:1]:   # one stage field: the column is narrow
                progress += f" {k} {v:.4f}" if isinstance(v, (int, float)) else ""
            if r.eta_s is not None:
                progress += f" ETA {duration(r.eta_s)}"
        lines.append(f"{r.run:<36}  {r.stage:<9} {r.state:<10} {r.slurm:<22} {progress:<34} {r.why}".rstrip())
    return lines


# ---- logs ---------------------------------------------------------------------------------------
#: submitit's first line in a job's stdout: where an attempt begins when a requeued Slurm job
#: appends to the file of its earlier attempts (JobFileAppend=1; the default truncates).
ATTEMPT_MARK = b" - Starting with JobEnvironment("


def current_job(view: RunView) -> tuple[str | None, int]:
    """(job ID, attempt number) of the run's current attempt: the last one started, else the last
    job submitted (attempt 0: not started yet)."""
    started = [a for a in view.attempts if a.get("start") and a.get("job_id")]
    if started:   # an array task's files are named by its "<array>_<task>" ID, not SLURM_JOB_ID
        array = view.jobs[-1]["job_id"] if view.jobs and view.jobs[-1].get("array") else None
        return str(array or started[-1]["job_id"]), started[-1]["attempt"]
    return (str(view.jobs[-1]["job_id"]) if view.jobs else None), 0


ERROR_WORDS = re.compile(r"error|unrecognized|denied|killed|exception|fatal|not found|no such", re.I)


def log_folder(store: Store, view: RunView) -> Path:
    """Where the run's job logs are: its own logs/, or its sweep's folder for an array task."""
    jobs = view.jobs
    if jobs and jobs[-1].get("sweep") and jobs[-1].get("folder"):   # a sweep's tasks share its folder
        return Path(jobs[-1]["folder"])
    return RunDir(store.run_dir(view.id)).logs


def last_error_line(store: Store, view: RunView, tail: int = 16 << 10) -> str | None:
    """The last line of the current attempt's stderr that reads as an error (else its last line):
    what a failed job said last, for `jobs status` beside Slurm's bare exit code."""
    job, _ = current_job(view)
    if not job:
        return None
    try:
        f = open_regular(log_folder(store, view) / f"{job}_0_log.err")
    except OSError:
        return None
    if f is None:
        return None
    with f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - tail))
        lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    if not lines:
        return None
    line = next((x for x in reversed(lines) if ERROR_WORDS.search(x)), lines[-1])
    line = line if line.isprintable() else repr(line)[1:-1]   # a control sequence never reaches the terminal
    return line if len(line) <= 200 else line[:197] + "..."


#: How often a follower asks Slurm whether a job ended without the entry recording it.
RECONCILE_S = 15.0


def _print(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def follow_logs(store: Store, run_id: str, task: int = 0, follow: bool = False,
                write: Callable[[str], None] = _print, poll_s: float = 1.0) -> int:
    """Print the current attempt's stdout and stderr (`<run>/logs/<job>_<task>_log.{out,err}`);
    with `follow`, keep printing until the run ends, moving on to each new attempt (a requeue
    after preemption or the time limit) as it starts.

    Returns the number of bytes printed. JobsError when there is nothing to show and not following.
    """
    folder = log_folder(store, store.run(run_id))
    shown, offsets, printed, asked = None, {}, 0, 0.0
    while True:
        view = lost(store.run(run_id))   # a LOST run never ends: stop following it
        if follow and slurm_job(view) and time.monotonic() - asked > RECONCILE_S:
            view, _ = statuses(store, [run_id])[0]   # records an end only Slurm saw
            asked = time.monotonic()
        job, attempt = current_job(view)
        paths = [folder / f"{job}_{task}_log.{ext}" for ext in ("out", "err")] if job else []
        if (job, attempt) != shown and any(p.exists() for p in paths):
            write(f"==> run {run_id} attempt {max(attempt, 1)}, job {job}: {folder} <==\n")
            # The same job requeued: go on where we are in its files, unless Slurm truncated them.
            same = shown is not None and shown[0] == job
            offsets = {p: offsets[p] if same and offsets.get(p) is not None else _attempt_offset(p, attempt)
                       for p in paths}
            shown = (job, attempt)
        for path in paths if shown == (job, attempt) else []:
            if offsets.get(path, 0) is None:
                continue   # truncated for the next attempt: read it once that attempt is recorded
            try:
                f = open_regular(path)
                if f is None:
                    raise JobsError(f"{path} is not a regular file (a FIFO, device or link in the run folder): "
                                    "not read")
                with f:
                    if f.seek(0, os.SEEK_END) < offsets.get(path, 0):   # Slurm truncated it for a requeue
                        offsets[path] = None
                        continue
                    f.seek(offsets.get(path, 0))
                    chunk = f.read()
                    offsets[path] = f.tell()
            except FileNotFoundError:
                continue
            if chunk:
                printed += len(chunk)
                write(chunk.decode(errors="replace"))
        if not follow:
            if shown is None:
                raise JobsError(f"run {run_id} has no logs yet in {folder}")
            return printed
        if view.state in TERMINAL or view.state == RunState.LOST:
            return printed
        time.sleep(poll_s)


def _attempt_offset(path: Path, attempt: int) -> int:
    """Where the current attempt begins in a stdout file earlier attempts of the same job also wrote."""
    if attempt <= 1 or path.suffix != ".out":
        return 0
    try:
        f = open_regular(path)
        if f is None:
            return 0
        with f:
            data = f.read()
    except OSError:
        return 0
    at = data.rfind(ATTEMPT_MARK)
    return 0 if at < 0 else data.rfind(b"\n", 0, at) + 1


# ---- local processes ------------------------------------------------------------------------


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


def _close_attempts(store: Store, view: RunView, reason: str = "cancelled by user") -> None:
    """A cancelled attempt gets its end now: the killed process never writes one, and `jobs show`
    would list it as running."""
    for a in view.attempts:
        if a.get("start") and not a.get("end") and "exit" not in a:
            store.add_event(view.id, "attempt", attempt=a["attempt"], end=time.time(), exit="cancelled",
                            reason=reason)


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
        _close_attempts(store, view, reason)
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
    _close_attempts(store, view, reason)
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


#: SQLite's largest integer: a larger --limit is no integer to it.
SQLITE_MAX = 2**63 - 1


def check_limit(limit: int) -> int:
    """--limit as SQLite can take it: 1 to 2**63 - 1."""
    if limit < 1:
        raise JobsError(f"--limit must be at least 1 (got {limit})")
    if limit > SQLITE_MAX:
        raise JobsError(f"--limit must be at most {SQLITE_MAX} (got {limit})")
    return limit


def table(store: Store, run: str | None = None, every: bool = False, limit: int = 200,
          as_json: bool = False, lines: bool = False) -> list[str]:
    """`jobs status`: one run, or the newest `limit` runs not yet ended (`every`: ended ones too);
    `as_json`: one JSON list of the runs (the Row's fields; `[]` when none), `lines`: one object per
    run and line (none when none)."""
    check_limit(limit)
    idx = store.index()
    if run:
        run_ids = [idx.resolve_run(run)]
    else:
        run_ids = [r["id"] for r in idx.runs(limit=limit) if every or r["state"] not in TERMINAL]
    if as_json or lines:
        docs = [strict_json(asdict(r), sort_keys=True) for r in rows(store, run_ids)]
        return docs if lines else [f"[{', '.join(docs)}]"]
    if not run_ids:   # one line that says so, not a header over nothing
        return [f"no runs {'in' if every else 'queued or running in'} {store.root}"
                + ("" if every else " (`jobs status --all`: ended runs too; `jobs list`: every run)")]
    return format_rows(rows(store, run_ids))


def cancel_run(store: Store, run: str) -> str:
    """`jobs cancel`: refuse a run that already ended; else cancel it and say how."""
    view = store.run(store.index().resolve_run(run))
    if view.state in TERMINAL:
        raise JobsError(f"run {view.id} already ended: {view.state}")
    store.ensure_writable()
    return f"{view.id} cancelled ({cancel(store, view)})"
