"""Where a run's current job writes: its job ID and attempt, its log folder, and each task's stdout
and stderr as submitit names them. Read by `jobs logs` and by failure triage alike."""
from __future__ import annotations

from pathlib import Path

from lineage import Store
from lineage.layout import RunDir
from lineage.store import RunView


def current_job(view: RunView) -> tuple[str | None, int]:
    """(job ID, attempt number) of the run's current attempt: the last one started, else the last
    job submitted (attempt 0: not started yet)."""
    started = [a for a in view.attempts if a.get("start") and a.get("job_id")]
    if started:   # an array task's files are named by its "<array>_<task>" ID, not SLURM_JOB_ID
        array = view.jobs[-1]["job_id"] if view.jobs and view.jobs[-1].get("array") else None
        return str(array or started[-1]["job_id"]), started[-1]["attempt"]
    return (str(view.jobs[-1]["job_id"]) if view.jobs else None), 0


def log_folder(store: Store, view: RunView) -> Path:
    """Where the run's job logs are: its own logs/, or its sweep's folder for an array task."""
    jobs = view.jobs
    if jobs and jobs[-1].get("sweep") and jobs[-1].get("folder"):   # a sweep's tasks share its folder
        return Path(jobs[-1]["folder"])
    return RunDir(store.run_dir(view.id)).logs


def log_paths(folder: Path, job: str, task: int = 0) -> tuple[Path, Path]:
    """(stdout, stderr) of one task of a job, named as submitit names them (its JobPaths): an array
    task's job is "<array>_<task>"."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=str(job), task_id=task)
    return paths.stdout, paths.stderr
