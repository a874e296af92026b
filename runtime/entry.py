"""Inside the job: resolve pending inputs, run the stage, register its outputs, record the end.

`StageJob` is what an executor ships (submitit pickles it). The stage runs in a worker thread so
that the main thread stays free for Slurm's signal: on USR2 (time limit or preemption) submitit
calls `checkpoint()`, which asks the stage to stop at its next step, waits for it to save, records
the attempt, and hands submitit a fresh StageJob to requeue. Same run ID, a new attempt.
"""
from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import submitit

from lineage import Store
from lineage.failures import Facts, classify, error_names, gpu_boundary, spent
from lineage.runspec import RunSpec
from lineage.states import RunState
from runtime.attempts import BATCH_START_ENV, STOP_GRACE_S
from runtime.errors import CorruptInput, JobFailed, RetriesSpent, UpstreamFailed
from runtime.image import NODE_ADDRS_ENV, check_image, ran_in
from stages import gate
from stages.contract import Distributed, Requeue, Resources, StageContext

#: Variables that name a process of the submitting host and mean nothing in the job. sbatch exports the
#: submit environment, so a `jobs submit` from a process where W&B ran (a notebook, a script) hands the
#: job that process's W&B service socket; the job's W&B, and NeMo RL's driver that inherits it, would
#: connect to it and fail (wandb's "Failed to connect to service on socket").
SUBMITTER_ONLY = ("WANDB_SERVICE",)


def verify_inputs(store: Store, inputs: dict[str, str]) -> None:
    """Re-hash every input before the stage reads it; one line naming the role, the artifact and the file."""
    from lineage.errors import LineageError

    for role, art in sorted(inputs.items()):
        try:
            store.verify(art)
        except LineageError as e:
            raise CorruptInput(f"input {role} is corrupt, not used: {' '.join(str(e).split())}") from None


def process_identity(pid: int | None = None) -> dict:
    """What tells this process apart from a later one with the same PID: host, PID, process group,
    and the start time in clock ticks since boot (/proc/<pid>/stat field 22) with the boot's ID.
    `jobs cancel` signals a local run only when all of them still match."""
    from runtime.attempts import boot_id, proc_start

    pid = pid or os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pgid": os.getpgid(pid),
            "proc_start": proc_start(pid), "boot_id": boot_id()}


def _batch_start() -> dict:
    """{"batch_start": epoch seconds} when the Slurm batch script's first line noted its time."""
    try:
        return {"batch_start": float(os.environ[BATCH_START_ENV])}
    except (KeyError, ValueError):
        return {}


def _own_process_group() -> None:
    """A local job leads its own process group, so cancel can stop it and its children without
    touching the `jobs submit` that waits for it (they would share the shell's group otherwise)."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "local":
        try:
            os.setpgid(0, 0)
        except OSError:
            pass


def resolve_pending(store: Store, spec: RunSpec) -> dict[str, str]:
    """Inputs from upstream runs of the same submission, read when this job starts."""
    resolved = {}
    for role, ref in spec.pending_inputs.items():
        up = store.run(ref["run"])
        if up.state != RunState.SUCCEEDED:
            raise UpstreamFailed(f"upstream run {ref['run']} ({up.spec.stage}) is {up.state}")
        resolved[role] = up.outputs[ref["output"]]
    return resolved


def distributed() -> Distributed:
    """Rank, world size and master address from Slurm (through submitit), or a single process."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return Distributed()
    env = submitit.JobEnvironment()
    nodes = list(env.hostnames)
    return Distributed(rank=env.global_rank, world_size=env.num_tasks, local_rank=env.local_rank,
                       master_addr=_address_of(nodes[0]), master_port=20000 + int(env.job_id.split("_")[0]) % 20000,
                       nodes=nodes)


def allocation() -> Resources:
    """What Slurm gave this task, read here once: stages see it as `ctx.resources`, never SLURM_*."""
    def count(*names: str) -> int:
        for name in names:
            value = os.environ.get(name, "").rsplit(":", 1)[-1]   # SLURM_GPUS_PER_NODE may say type:count
            if value.isdigit():
                return int(value)
        return 0

    return Resources(cpus_per_task=count("SLURM_CPUS_PER_TASK"),
                     gpus_per_node=count("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"),
                     job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"))


def _address_of(node: str) -> str:
    """The node's address: DNS if it resolves, else what slurmctld knows (NodeAddr): from
    $JOBS_NODE_ADDRS (node=addr,...), which a container job's batch script reads with scontrol on
    the host (the image has no Slurm commands), or from scontrol itself."""
    try:
        return socket.gethostbyname(node)
    except OSError:
        pass
    known = dict(item.split("=", 1) for item in os.environ.get(NODE_ADDRS_ENV, "").split(",") if "=" in item)
    if node in known:
        return known[node]
    out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True).stdout
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    raise OSError(f"no address for node {node}")


class StageJob(submitit.helpers.Checkpointable):
    def __init__(self, store_root: str, run_id: str):
        self.store_root = store_root
        self.run_id = run_id

    def __getstate__(self) -> dict:
        return {"store_root": self.store_root, "run_id": self.run_id}

    def __call__(self) -> dict[str, str] | None:
        self._stop = threading.Event()
        self._done: dict = {}
        self._thread = threading.Thread(target=self._work, name="stage", daemon=True)
        self._thread.start()
        # runtime.hold_usr2 held Slurm's USR2 until now, when submitit's handler and the stage that
        # checkpoint() stops both exist: one that came early is delivered here. The stage thread
        # keeps it blocked.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        while self._thread.is_alive():
            self._thread.join(timeout=1.0)  # short waits keep the main thread free for signals
        if "error" in self._done:
            raise self._done["error"]
        return self._done.get("outputs")

    def _work(self) -> None:
        # Slurm signals every process of the step, not only ours: without this, its USR2 kills the
        # Ray processes and engines the stage starts (they inherit this thread's mask) before the
        # stage can checkpoint. The main thread still takes it, for checkpoint() below.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        try:
            self._done["outputs"] = execute(self.store_root, self.run_id, self._stop.is_set)
        except BaseException as e:  # handed to the main thread
            self._done["error"] = e

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit on rank 0 when Slurm signals: let the stage save, then requeue."""
        self._stop.set()
        self._thread.join(timeout=STOP_GRACE_S)
        error = self._done.get("error")
        if "outputs" in self._done or (error is not None and not isinstance(error, Requeue)):
            return None  # it ended in the meantime (done, or failed and recorded): nothing to resume
        return submitit.helpers.DelayedSubmission(StageJob(self.store_root, self.run_id))


@contextmanager
def _ray(ctx: StageContext, phases: dict[str, float]) -> Iterator[None]:
    """Ray over the allocation for the stage, ended before anything is recorded, however the stage ends.
    The seconds its start and its stop took go into `phases`."""
    from runtime import ray_cluster

    t0, stopping = time.monotonic(), None
    try:
        with ray_cluster.head(ctx.dist, ctx.run_dir) as address:
            phases["ray_start"] = round(time.monotonic() - t0, 3)
            ctx.ray_address = address
            os.environ["RAY_ADDRESS"] = address  # a bare ray.init() in the stage attaches too
            try:
                yield
            finally:
                os.environ.pop("RAY_ADDRESS", None)
                stopping = time.monotonic()
    finally:
        if stopping is not None:
            phases["ray_stop"] = round(time.monotonic() - stopping, 3)


def execute(store_root: str, run_id: str, should_stop=lambda: False) -> dict[str, str] | None:
    """Run one recorded stage to the end; returns its outputs as {name: artifact ID} on rank 0."""
    for name in SUBMITTER_ONLY:
        os.environ.pop(name, None)
    store = Store(Path(store_root))
    spec = store.run_spec(run_id)
    dist, resources = distributed(), allocation()
    view = store.run(run_id)
    if view.state in (RunState.SUCCEEDED, RunState.CANCELLED):
        return view.outputs  # a requeue after the end: nothing left to do
    attempt = 1 + sum(1 for a in view.attempts if a.get("start"))
    main = dist.is_main
    _own_process_group()
    try:
        pending = resolve_pending(store, spec)
    except UpstreamFailed as e:
        if main:
            store.add_event(run_id, "status", state=RunState.CANCELLED, reason=str(e))
        raise
    inputs = {**spec.inputs, **pending}
    if pending and main and any(view.inputs.get(k) != v for k, v in pending.items()):
        store.add_event(run_id, "inputs", inputs=pending, run_key=spec.with_(inputs=inputs).key())

    if main:
        from runtime.attempts import close_interrupted

        closed = close_interrupted(store, view, attempt)  # an earlier attempt that died without a word
        for cls in closed:   # Slurm requeued it (node failure, scontrol requeue): within the budget?
            over = spent(store.run(run_id).attempts, cls, spec.retries)
            if over:
                store.add_event(run_id, "status", state=RunState.FAILED, reason=over, failure_class=cls)
                raise RetriesSpent(over)
        store.add_event(run_id, "attempt", attempt=attempt, **process_identity(), **_batch_start(),
                        job_id=resources.job_id,
                        nodes=dist.nodes or [socket.gethostname()], start=time.time(), **ran_in())
        store.add_event(run_id, "status", state=RunState.RUNNING)
    ctx = StageContext(
        run_id=run_id, recipe=spec.recipe, stage=spec.stage, config=spec.config,
        inputs={role: Path(store.artifact(art)["path"]) for role, art in inputs.items()},
        run_dir=store.run_dir(run_id), dist=dist, resources=resources, attempt=attempt, should_stop=should_stop,
        input_ids=dict(inputs),  # checkpoints carry them; resume refuses another run's
        recorded_config=spec.config,
    )

    # Seconds each phase of this attempt took (verify, ray_start, stage, ray_stop, gate, register; and
    # inside stage, the stage's own ctx.timed phases: load, train, save), recorded with the attempt's end
    # however it ends: where the time went, a failed attempt's too.
    phases: dict[str, float] = {}

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            phases[name] = round(time.monotonic() - t0, 3)

    def end(**fields) -> None:
        if ctx.summary:
            store.add_event(run_id, "metrics", metrics=ctx.summary)
        if ctx.links:
            store.add_event(run_id, "tracker", trackers=ctx.links)
        timed = {**phases, **{f"stage.{k}": v for k, v in ctx.phases.items()}}   # the stage's own: load, train, save
        store.add_event(run_id, "attempt", attempt=attempt, end=time.time(), **({"phases": timed} if timed else {}),
                        **fields)

    try:
        with phase("verify"):
            check_image(spec.to_json())  # torch, ray, vllm...: one line naming what the image lacks, before any work
            from lineage.secrets import unredact

            ctx.config = unredact(spec.config)  # secrets the record left out come from this job's environment
            if main:
                verify_inputs(store, inputs)
        if spec.ray and not main:
            from runtime import ray_cluster

            ray_cluster.serve_worker(dist, ctx.run_dir)  # this node's Ray worker, until rank 0 is done
            return None
        module = importlib.import_module(spec.module)
        with _ray(ctx, phases) if spec.ray else nullcontext(), phase("stage"):
            produced = module.run(ctx)
        if not main:
            return None
        missing = set(spec.outputs) - set(produced or {})
        if missing:
            raise JobFailed(f"stage {spec.stage} did not return outputs {sorted(missing)}")
        # The results gate (stages/gate.py): what the outputs must show before any becomes an artifact.
        with phase("gate"):
            checks = gate.evaluate(getattr(module, "gate", None), ctx, produced)
        if checks:
            store.add_event(run_id, "gate", checks=[c.to_json() for c in checks])
        if gate.verdict(checks):
            raise gate.GateFailed(gate.verdict(checks))
        with phase("register"):
            outputs = {   # a reproduction moves no name: bit for bit, its outputs are the versions it checked
                name: store.register(Path(produced[name]), kind=kind, run=run_id,
                                     name=f"{spec.recipe}/{spec.stage}/{name}", version=not spec.reproduces)
                for name, kind in spec.outputs.items()
            }
    except Requeue:
        if main:
            from runtime.attempts import stop

            cls, reason = stop()
            over = spent([*store.run(run_id).attempts, {"failure_class": cls}], cls, spec.retries)
            if over:
                reason = reason.removesuffix("; requeued") + "; not requeued (retry budget spent)"
            end(exit="stopped" if over else "requeued", reason=reason, failure_class=cls)
            if over:   # checkpoint() sees this error and hands submitit nothing to requeue
                store.add_event(run_id, "status", state=RunState.FAILED, reason=over, failure_class=cls)
                raise RetriesSpent(over) from None
            store.add_event(run_id, "status", state=RunState.QUEUED, reason="checkpointed; requeued")
        raise
    except gate.GateFailed as e:   # the stage ran; its outputs showed nothing worth keeping: the gate's line
        cls = classify(Facts(error=error_names(e), message=str(e)))
        end(exit="gate", error=str(e), failure_class=cls)
        store.add_event(run_id, "status", state=RunState.FAILED, reason=str(e), failure_class=cls)
        raise
    except BaseException as e:
        if main:
            cls = classify(Facts(error=error_names(e), message=str(e)))
            # Where the GPU-only request was refused: the launched program's (GpuBoundary), else this
            # process's own traceback's last frame (a library the stage called in-process).
            at = getattr(e, "where", None) or (gpu_boundary("".join(traceback.format_exception(e)).splitlines())
                                               if cls == "gpu_boundary" else None)
            end(exit="error", error=traceback.format_exception_only(type(e), e)[-1].strip(), failure_class=cls,
                **({"boundary": at} if at else {}))
            store.add_event(run_id, "status", state=RunState.FAILED, reason=f"{cls}: {type(e).__name__}: {e}",
                            failure_class=cls)
        raise
    store.add_event(run_id, "outputs", outputs=outputs)
    end(exit=0)
    store.add_event(run_id, "status", state=RunState.SUCCEEDED)
    return outputs
