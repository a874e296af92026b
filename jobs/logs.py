"""`jobs logs [-f]`: the current attempt's job output, and the last error line a failed job wrote."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

from jobs.errors import JobsError
from jobs.logfiles import current_job, log_folder, log_paths
from jobs.reconcile import lost, slurm_job, statuses
from lineage import Store
from lineage.records import open_regular
from lineage.states import TERMINAL, RunState
from lineage.store import RunView

#: submitit's first line in a job's stdout: where an attempt begins when a requeued Slurm job
#: appends to the file of its earlier attempts (JobFileAppend=1; the default truncates).
ATTEMPT_MARK = b" - Starting with JobEnvironment("


ERROR_WORDS = re.compile(r"error|unrecognized|denied|killed|exception|fatal|not found|no such", re.I)


def last_error_line(store: Store, view: RunView, tail: int = 16 << 10) -> str | None:
    """The last line of the current attempt's stderr that reads as an error (else its last line):
    what a failed job said last, for `jobs status` beside Slurm's bare exit code."""
    job, _ = current_job(view)
    if not job:
        return None
    try:
        f = open_regular(log_paths(log_folder(store, view), job)[1])
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
        paths = list(log_paths(folder, job, task)) if job else []
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
