"""Inside the job: resolve pending inputs, run the stage, register its outputs, record the end.

This is the function an executor ships to the allocation (submitit pickles it by reference).
"""
from __future__ import annotations

import importlib
import os
import socket
import time
import traceback
from pathlib import Path

from jobs.context import Distributed, StageContext
from lineage import Store


class UpstreamFailed(Exception):
    pass


def resolve_pending(store: Store, spec: dict) -> dict[str, str]:
    """Inputs from upstream runs of the same submission, read when this job starts."""
    resolved = {}
    for role, ref in spec.get("pending_inputs", {}).items():
        up = store.run(ref["run"])
        if up.state != "SUCCEEDED":
            raise UpstreamFailed(f"upstream run {ref['run']} ({up.spec['stage']}) is {up.state}")
        resolved[role] = up.outputs[ref["output"]]
    return resolved


def execute(store_root: str, run_id: str) -> dict[str, str]:
    """Run one recorded stage to the end; returns its outputs as {name: artifact ID}."""
    store = Store(Path(store_root))
    spec = store.run_spec(run_id)
    view = store.run(run_id)
    attempt = len(view.attempts) + 1
    try:
        pending = resolve_pending(store, spec)
    except UpstreamFailed as e:
        store.add_event(run_id, "status", state="CANCELLED", reason=str(e))
        raise
    if pending:
        store.add_event(run_id, "inputs", inputs=pending)
    inputs = {**spec["inputs"], **pending}

    store.add_event(run_id, "attempt", attempt=attempt, host=socket.gethostname(), pid=os.getpid(),
                    job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"),
                    start=time.time())
    store.add_event(run_id, "status", state="RUNNING")
    ctx = StageContext(
        run_id=run_id, recipe=spec["recipe"], stage=spec["stage"], config=spec["config"],
        inputs={role: Path(store.artifact(art)["path"]) for role, art in inputs.items()},
        run_dir=store.run_dir(run_id), dist=Distributed(), attempt=attempt,
    )
    try:
        module = importlib.import_module(spec["module"])
        produced = module.run(ctx)
        missing = set(spec["outputs"]) - set(produced)
        if missing:
            raise RuntimeError(f"stage {spec['stage']} did not return outputs {sorted(missing)}")
        outputs = {
            name: store.register(Path(produced[name]), kind=kind, run=run_id,
                                 name=f"{spec['recipe']}/{spec['stage']}/{name}")
            for name, kind in spec["outputs"].items()
        }
    except BaseException as e:
        store.add_event(run_id, "attempt", attempt=attempt, end=time.time(), exit="error",
                        error=traceback.format_exception_only(type(e), e)[-1].strip())
        if ctx.summary:
            store.add_event(run_id, "metrics", metrics=ctx.summary)
        store.add_event(run_id, "status", state="FAILED", reason=f"{type(e).__name__}: {e}")
        raise
    store.add_event(run_id, "outputs", outputs=outputs)
    if ctx.links:
        store.add_event(run_id, "tracker", trackers=ctx.links)
    if ctx.summary:
        store.add_event(run_id, "metrics", metrics=ctx.summary)
    store.add_event(run_id, "attempt", attempt=attempt, end=time.time(), exit=0)
    store.add_event(run_id, "status", state="SUCCEEDED")
    return outputs
