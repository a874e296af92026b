"""Where things are in a store and in a run's folder: the one place that spells the layout.

    <root>/records/  refs/          the records and the names (lineage/store.py, lineage/refs.py)
    <root>/runs/<run_id>/           a run's folder (`RunDir`)
    <root>/code/<art_id>/           a code snapshot, what a job runs
    <root>/imports/<id>/<name>      what `jobs add` copied in
    <root>/runtime/                 the runtime bundles container jobs put on sys.path
    <root>/sweeps/<sweep_id>/       a sweep's Slurm job array: its submission script and every task's logs

Launcher, runtime and stages ask for a path by its meaning, so the layout can change here alone.
The kept training snapshots under a run's checkpoints (`keep/<series>-step<N>.{pt,json}`) are written
and read through `write_kept` and `kept_snapshots`, so their format lives in one place too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lineage.records import strict_json

RECORDS, REFS, RUNS, CODE, IMPORTS, RUNTIME, SWEEPS = "records", "refs", "runs", "code", "imports", "runtime", "sweeps"


def run_path(root: Path, run_id: str) -> Path:
    return Path(root) / RUNS / run_id


def code_path(root: Path, snapshot: str) -> Path:
    """The folder of the code snapshot artifact `snapshot`."""
    return Path(root) / CODE / snapshot


def import_path(root: Path, ident: str, name: str) -> Path:
    return Path(root) / IMPORTS / ident / name


def runtime_path(root: Path) -> Path:
    return Path(root) / RUNTIME


def sweep_path(root: Path, sweep_id: str) -> Path:
    """Where a sweep's job array keeps its submission script and its tasks' logs (submitit's folder)."""
    return Path(root) / SWEEPS / sweep_id


@dataclass(frozen=True)
class RunDir:
    """A run's folder: its job logs, outputs, per-attempt folders, checkpoints and progress files."""

    path: Path

    @property
    def logs(self) -> Path:
        """submitit's folder: the job's stdout, stderr and pickles, one set per Slurm job or local process."""
        return self.path / "logs"

    @property
    def controller_log(self) -> Path:
        """A local run's submitit controller writes its own stderr here, never under the user's prompt."""
        return self.logs / "controller.err"

    def output(self, name: str) -> Path:
        return self.path / "outputs" / name

    def attempt(self, n: int) -> Path:
        return self.path / "attempts" / str(n)

    @property
    def checkpoints(self) -> Path:
        """Survives requeues: the same folder for every attempt of the run."""
        return self.path / "checkpoints"

    @property
    def metrics(self) -> Path:
        """One JSON object per logged step (stages.contract.StageContext.log)."""
        return self.path / "metrics.jsonl"

    @property
    def progress(self) -> Path:
        """The stage's latest progress (stages.ml.tracking.Progress), replaced as it goes."""
        return self.path / "progress.json"


KEEP = "keep"


def write_kept(checkpoints: Path, series: str, step: int, weights: bytes, metrics: dict, write) -> None:
    """Keep a training snapshot: `<checkpoints>/keep/<series>-step<N>.pt` (weights) and `.json` (the
    metrics at that step), which `jobs gc --keep-top-k` ranks. `write(path, bytes)` writes atomically."""
    snap = Path(checkpoints) / KEEP / f"{series}-step{step:07d}"
    write(snap.with_suffix(".pt"), weights)
    write(snap.with_suffix(".json"), strict_json({"step": step, "metrics": metrics}, sort_keys=True).encode())


@dataclass
class Snapshot:
    run: str
    series: str
    step: int
    metrics: dict
    files: list[Path]


def kept_snapshots(root: Path) -> dict[tuple[str, str], list[Snapshot]]:
    """Every kept training snapshot in the store at `root`, by run and series; a file not in
    `write_kept`'s format is Damaged, naming it."""
    from lineage.errors import Damaged, show_path
    from lineage.records import read_record

    groups: dict[tuple[str, str], list[Snapshot]] = {}
    for meta in sorted((Path(root) / RUNS).glob(f"*/checkpoints/{KEEP}/*.json")):
        run = meta.parents[2].name
        series, _, step = meta.stem.rpartition("-step")
        if not series or not step.isdigit():
            raise Damaged(f"damaged store file {show_path(meta)}: not named <series>-step<N>.json; move it aside")
        info = read_record(meta)   # a regular file holding a JSON object, else Damaged (a FIFO never blocks)
        metrics = info.get("metrics", {})
        if not isinstance(metrics, dict):
            raise Damaged(f"damaged store file {show_path(meta)}: 'metrics' is not a mapping; move it aside")
        groups.setdefault((run, series), []).append(
            Snapshot(run, series, int(step), metrics, [meta, meta.with_suffix(".pt")]))
    return groups
