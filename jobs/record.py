"""The submit path's one writing step: the run cache, the code snapshot, the QUEUED run records.

`settle` decides, stage by stage, whether an identical run already succeeded (the run cache) and
otherwise builds the run's record (lineage.runspec.RunSpec) with its cache key, once; `record`
stores the code snapshot and writes those records. Everything before it (jobs/plan.py, the
executor's `prepare`) reads only.
"""
from __future__ import annotations

from dataclasses import dataclass

from jobs.plan import Plan, run_spec
from lineage import Store
from lineage.errors import LineageError
from lineage.runspec import RunSpec


@dataclass(frozen=True)
class Settled:
    """One stage of a plan, settled: an earlier run reused, or a run to record."""

    stage: str
    reused: str | None = None            # the ID of an identical, verified, SUCCEEDED run
    spec: RunSpec | None = None          # else the record to write (pending inputs name stages)


def settle(store: Store, plan: Plan, facts: list[dict] | None = None, *, use_cache: bool = True) -> list[Settled]:
    """Each stage's run record with its key, or the run that already computed it.

    A stage downstream of a reused one takes the reused run's outputs as inputs, so it can be
    reused too; a stage downstream of one that runs now waits for it (pending inputs), and its key
    is recorded when the job starts (runtime.entry)."""
    idx = store.index() if use_cache and store.has_records() else None
    settled: list[Settled] = []
    outputs: dict[str, dict[str, str]] = {}   # stage -> outputs of its reused run
    for i, sp in enumerate(plan.stages):
        inputs, pending = dict(sp.inputs), {}
        for role, (st, out) in sp.upstream.items():
            if st in outputs:
                inputs[role] = outputs[st][out]
            else:
                pending[role] = {"stage": st, "output": out}
        spec = run_spec(plan, i, facts, inputs, pending)
        if pending:
            settled.append(Settled(sp.stage, spec=spec))
            continue
        spec = spec.with_(run_key=spec.key())
        hit = cached(store, idx, spec.run_key) if idx is not None else None
        if hit is not None:
            outputs[sp.stage] = store.run(hit).outputs
        settled.append(Settled(sp.stage, reused=hit) if hit else Settled(sp.stage, spec=spec))
    return settled


def cached(store: Store, idx, key: str) -> str | None:
    """A SUCCEEDED run with this key whose outputs still verify."""
    for candidate in idx.runs_with_key(key):
        view = store.run(candidate)
        try:
            for art in view.outputs.values():
                store.verify(art)
        except LineageError:
            continue
        return candidate
    return None


def record(store: Store, plan: Plan, facts: list[dict] | None = None,
           settled: list[Settled] | None = None) -> list[str]:
    """Store the code snapshot (once: identical code is never copied again), then write one QUEUED
    run record per stage not reused, each pending input pointing at its upstream run's ID.

    Raises CodeChanged, before any record is written, when the code moved since it was hashed."""
    from jobs.provenance import store_snapshot

    if settled is None:
        settled = settle(store, plan, facts, use_cache=False)
    store_snapshot(store, plan.code)
    run_ids: dict[str, str] = {}
    for s in settled:
        if s.reused:
            continue
        pending = {role: {"run": run_ids[ref["stage"]], "output": ref["output"]}
                   for role, ref in s.spec.pending_inputs.items()}
        run_ids[s.stage] = store.create_run(s.spec.with_(pending_inputs=pending))
    return [run_ids[s.stage] for s in settled if s.stage in run_ids]
