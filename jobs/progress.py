"""Where a running stage's training stands: its progress.json, else the last loss in metrics.jsonl."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lineage.layout import RunDir
from lineage.records import open_regular

METRICS_TAIL = 64 << 10   # bytes read from the end of metrics.jsonl


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
