"""`jobs status`: each run joined with Slurm (jobs/reconcile.py records an end only Slurm saw), with,
for a running run, where its training stands (jobs/progress.py) and, for a pending Slurm job,
Slurm's reason and expected start; a failed run's last error line comes from its log (jobs/logs.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from jobs.filters import check_limit
from jobs.logs import last_error_line
from jobs.progress import read_progress
from jobs.reconcile import Live, slurm_job, statuses
from lineage import Store
from lineage.records import strict_json
from lineage.states import TERMINAL, RunState

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
