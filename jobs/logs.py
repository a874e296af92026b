"""`jobs logs`: print a run's job output, or follow it until the run ends."""
from __future__ import annotations

import sys
import time
from pathlib import Path


def show(store, run_id: str, task: int = 0, follow: bool = False, write=sys.stdout.write) -> None:
    """Every log file of `task` (one per attempt, oldest first); with `follow`, keep printing what
    the current attempt appends until the run ends (a LOST run never ends: stop following it)."""
    from jobs import status
    from jobs.errors import JobsError
    from lineage.states import TERMINAL, RunState

    folder = store.run_dir(run_id) / "logs"
    if not _logs(folder, task) and not follow:
        raise JobsError(f"run {run_id} has no logs yet in {folder}")
    offsets: dict[Path, int] = {}
    while True:
        for path in _logs(folder, task):
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                chunk = f.read()
                offsets[path] = f.tell()
            if chunk:
                if not follow:
                    write(f"==> {path} <==\n")
                write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        if not follow:
            return
        view = status.lost(store.run(run_id))
        if view.state in TERMINAL or view.state == RunState.LOST:
            return
        time.sleep(1.0)


def _logs(folder: Path, task: int) -> list[Path]:
    """submitit's stdout and stderr of one task, per attempt, oldest first."""
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"*_{task}_log.*"), key=lambda p: (p.stat().st_mtime, p.name))
