"""The stage contract: what a stage module implements (`StageModule`) and what it is handed
(`StageContext`: its resolved config, its inputs as local paths, the allocation, where to write,
how to log).

Stages share this contract, not a base class. The launcher (jobs/) checks it at submit; the
runtime (runtime/) calls `run(ctx)` inside the allocation; neither is imported from here.
"""
from __future__ import annotations

import os
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Protocol, runtime_checkable

from lineage.layout import RunDir
from lineage.records import member_mode, strict_json


@runtime_checkable
class StageModule(Protocol):
    """A stage is a module with `run`. The recipes' stages also have `check_config(config,
    resources=None) -> [problems]` (each one line; run at submit, before anything is recorded, so
    a bad value never waits in a queue; tests/recipes/test_stage_contract.py holds every stage to
    it) and may have `preview(config, resources) -> str`, what `--dry-run` shows it will launch, and
    `notes(config) -> [lines]`, what submit says of a value the stage will run otherwise than written
    (a warmup longer than a short run, shortened).
    A stage whose recipe gives it a Ray cluster (`ray: true`) may have `uses_ray(config) -> bool`:
    False when this config runs without one, so the job starts none (absent: it always does).
    A stage may have `unused_inputs(config) -> roles`: the recipe's input roles this config never
    reads; the plan neither resolves nor waits for them, and `ctx.inputs` lacks them.
    A stage may have `gate(ctx, produced) -> [stages.gate.Check]`, the results gate: what its
    outputs must show (steps run, finite losses, tokens generated, rows, weights that load); the
    runtime runs it after `run` returns, records every check, and registers nothing when one fails."""

    def run(self, ctx: "StageContext") -> dict[str, Path]:
        """Train or transform; return {output name: folder} for the runtime to register."""


class StageError(ValueError):
    """A stage refuses its config, its inputs or its state, in one line; the run fails with it."""


class GpuBoundary(Exception):
    """An upstream program the stage launched ran up to its first GPU-only request and was refused there
    (a machine without GPUs): `where` is {"file", "line", "message"} of the refusal
    (lineage.failures.gpu_boundary). The attempt records it; a retry would stop at the same line."""

    def __init__(self, where: dict):
        self.where = where
        super().__init__(f"stopped at GPU boundary: {where['file']}:{where['line']} ({where['message']})")


class Requeue(Exception):
    """Raised through `ctx.requeue()` by a stage that has checkpointed and wants to resume later."""


@dataclass
class Distributed:
    """The torch.distributed / Ray contract, read from Slurm's variables (or one local process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    nodes: list[str] = field(default_factory=list)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass
class Resources:
    """What the allocation gives this task, as the runtime read it from Slurm: the stage is handed
    it rather than reading SLURM_* itself. 0 or None: not known (a local run, a test's own context)."""

    cpus_per_task: int = 0
    gpus_per_node: int = 0
    job_id: str | None = None


@dataclass
class StageContext:
    run_id: str
    recipe: str
    stage: str
    config: dict[str, Any]
    inputs: dict[str, Path]
    run_dir: Path
    dist: Distributed = field(default_factory=Distributed)
    resources: Resources = field(default_factory=Resources)
    attempt: int = 1
    #: Set by the entry when Slurm warns of preemption or the time limit: checkpoint and return.
    should_stop: Callable[[], bool] = lambda: False
    #: The Ray cluster over this job's allocation (`ray: true` stages, rank 0): `ray.init(address=...)`.
    ray_address: str | None = None
    #: The inputs' artifact IDs by role (set by the entry; empty when a test builds the context).
    input_ids: dict[str, str] = field(default_factory=dict)
    #: The config as the run record holds it (secrets redacted): what checkpoints, trackers and the
    #: config digest use, so no secret lands in the run folder and a rotated token does not block resume.
    recorded_config: dict[str, Any] | None = None
    _metrics: dict[str, Any] = field(default_factory=dict)
    _trackers: list[Any] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    #: Seconds this attempt spent in each of the stage's own phases (`timed`): the entry records them
    #: with its own as `stage.<phase>`.
    phases: dict[str, float] = field(default_factory=dict)
    _inner: list[float] = field(default_factory=list)

    def section(self, name: str) -> dict[str, Any]:
        """The config's `name:` section; StageError when the config lacks it or it is not a mapping."""
        value = self.config.get(name)
        if not isinstance(value, dict):
            raise StageError(f"stage {self.stage}: the config has no {name}: section (a mapping)")
        return value

    def input(self, role: str) -> Path:
        if role not in self.inputs:
            raise KeyError(f"stage {self.stage} has no input {role!r} (inputs: {', '.join(self.inputs)})")
        return self.inputs[role]

    def output_dir(self, name: str) -> Path:
        """A fresh folder for output `name`. A folder an earlier attempt left behind is writable again."""
        path = RunDir(self.run_dir).output(name)
        if path.exists():
            for dirpath, _, filenames in os.walk(path):
                for p in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
                    os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def checkpoint_dir(self) -> Path:
        """Survives requeues: the same folder for every attempt of this run."""
        path = RunDir(self.run_dir).checkpoints
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def attempt_dir(self) -> Path:
        """This attempt's own log folder (`<run>/attempts/<n>`); metrics, TensorBoard and the W&B run
        id stay one per run."""
        path = RunDir(self.run_dir).attempt(self.attempt)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def config_to_keep(self) -> dict[str, Any]:
        return self.config if self.recorded_config is None else self.recorded_config

    @property
    def config_digest(self) -> str:
        """sha256 of the recorded config's canonical JSON: a checkpoint written under another config
        has another digest."""
        from lineage.hashing import hash_json

        return str(hash_json(self.config_to_keep))

    def identity(self) -> dict[str, Any]:
        """What every checkpoint of this run carries, and what resume checks it against."""
        return {"run_id": self.run_id, "config_digest": self.config_digest, "inputs": dict(self.input_ids)}

    def add_tracker(self, tracker: Any, link: tuple[str, str] | None = None) -> None:
        """Anything with `log(metrics: dict, step: int)` receives every ctx.log call.

        `link` (name, where), e.g. ("wandb", "offline-run-…/path"), goes into the run record.
        """
        self._trackers.append(tracker)
        if link:
            self.links[link[0]] = link[1]

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Adds the seconds spent inside to `phase` ("load", "train", "save"). A phase timed inside another
        counts for itself only (a save inside the training loop is save, not train), so the phases add
        up to at most the stage's time."""
        t0 = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent = time.monotonic() - t0
            inner = self._inner.pop()
            self.phases[phase] = round(self.phases.get(phase, 0.0) + spent - inner, 3)
            if self._inner:
                self._inner[-1] += spent

    def requeue(self) -> NoReturn:
        """Call after saving a checkpoint when `should_stop()` is true: the run resumes in a new attempt."""
        raise Requeue(f"stage {self.stage} checkpointed and asked to be requeued")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Append to metrics.jsonl (rank 0 only), keep the last value of each, forward to trackers."""
        if not self.dist.is_main:
            return
        self._metrics.update(metrics)
        fd = os.open(RunDir(self.run_dir).metrics, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            if os.fstat(fd).st_uid == os.geteuid():   # readable as the store's members may, whatever the umask
                os.fchmod(fd, member_mode(stat.S_IMODE(os.stat(self.run_dir).st_mode)))
            f.write(strict_json({"step": step, "time": time.time(), **metrics}, sort_keys=True) + "\n")
        for tracker in self._trackers:
            tracker.log(metrics, step)

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self._metrics)
