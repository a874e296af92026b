"""What an attempt waited for, derived from what the store already holds (no write of its own).

Per attempt: `queued`, the seconds from its submission (the Slurm `job` event naming its job id, the
latest one before it; else the run's creation, which is a local run's submit) to the batch script's
first line (`batch_start`, Slurm only) or else to the stage entry (`start`); and `boot`, the seconds from
the batch script's first line to the stage entry: image import and bootstrap. An attempt that never
started has neither. Below the floor: reconcile and triage may use it.
"""
from __future__ import annotations


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _submitted(view, attempt: dict) -> float | None:
    """When this attempt was handed to its executor, as recorded."""
    start = _num(attempt.get("batch_start")) or _num(attempt.get("start"))
    jobs = [j for j in view.jobs if _num(j.get("time")) is not None]
    mine = [j for j in jobs if attempt.get("job_id") and str(j.get("job_id")) == str(attempt["job_id"])]
    before = [j for j in (mine or jobs) if start is None or j["time"] <= start]
    if before:
        return max(j["time"] for j in before)
    return _num(getattr(view.spec, "created", None)) if not jobs else None


def waits(view) -> list[dict]:
    """[{"attempt": n, "queued": s | None, "boot": s | None}] for each attempt of a run view."""
    out = []
    for a in view.attempts:
        start, batch = _num(a.get("start")), _num(a.get("batch_start"))
        sub = _submitted(view, a)
        began = batch if batch is not None else start
        out.append({"attempt": a.get("attempt"),
                    "queued": round(began - sub, 3) if began is not None and sub is not None and began >= sub else None,
                    "boot": round(start - batch, 3) if start is not None and batch is not None and start >= batch else None})
    return out
