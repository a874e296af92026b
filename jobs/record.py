"""The submit path's one writing step: the run cache, the code snapshot, the QUEUED run records.

`settle` decides, stage by stage (a sweep: point by point), whether an identical run already
succeeded (the run cache) and otherwise builds the run's record (lineage.runspec.RunSpec) with its
cache key, once; `record` stores the code snapshot and writes those records, and a sweep's grid
and this submission of it (lineage/sweeps.py). Everything before it (jobs/plan.py, the executor's
`prepare`) reads only.
"""
from __future__ import annotations

from dataclasses import dataclass

from jobs.plan import Plan, run_spec
from lineage import Store
from lineage.errors import LineageError
from lineage.runspec import RunSpec
from lineage.states import TERMINAL


@dataclass(frozen=True)
class Settled:
    """One stage of a plan, settled: an earlier run reused, or a run to record."""

    stage: str
    reused: str | None = None            # the ID of an identical, verified, SUCCEEDED run
    spec: RunSpec | None = None          # the record to write, when not reused (pending inputs name stages)
    standing: bool = False               # a sweep's point: `reused` is still queued or running, as recorded,
                                         # from an earlier submission of the same sweep


def settle(store: Store, plan: Plan, facts: list[dict] | None = None, *, use_cache: bool = True) -> list[Settled]:
    """Each stage's run record with its key, or the run that already computed it.

    A stage downstream of a reused one takes the reused run's outputs as inputs, so it can be
    reused too; a stage downstream of one that runs now waits for it (pending inputs), and its key
    is recorded when the job starts (runtime.entry). A sweep's points are independent runs of one
    stage; the sweep's ID comes from their keys, and a point whose run from an earlier submission of
    it is still queued or running, as its record says, is left to that run."""
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
        settled.append(Settled(sp.stage, reused=hit, spec=spec))
    return _points(store, plan, settled, use_cache) if plan.grid else settled


def _points(store: Store, plan: Plan, settled: list[Settled], use_cache: bool) -> list[Settled]:
    """A sweep's settled points: each record names the sweep and its point; a point still standing
    from an earlier submission (its record not ended) is left to that run unless the cache is off."""
    from lineage import sweeps as records

    sweep_id = records.make_id([s.spec.run_key for s in settled])
    standing: dict[int, str] = {}
    if use_cache:
        try:
            earlier = records.read(store, sweep_id).runs
        except LineageError:   # not submitted before
            earlier = []
        for i, run in enumerate(earlier):
            if run and store.run(run).state not in TERMINAL:
                standing[i] = run
    out = []
    for i, (s, values) in enumerate(zip(settled, plan.grid.values)):
        spec = s.spec.with_(sweep={"id": sweep_id, "point": i, "values": values})
        if not s.reused and i in standing:
            out.append(Settled(s.stage, reused=standing[i], spec=spec, standing=True))
        else:
            out.append(Settled(s.stage, reused=s.reused, spec=spec))
    return out


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
           settled: list[Settled] | None = None, max_parallel: int | None = None) -> list[str]:
    """Store the code snapshot (once: identical code is never copied again), then write one QUEUED
    run record per stage (or sweep point) not reused, each pending input pointing at its upstream
    run's ID; for a sweep, its grid (once) and which run stands for each point after this submission.
    Returns the runs recorded now, in order.

    Raises CodeChanged, before any record is written, when the code moved since it was hashed."""
    from jobs.provenance import store_snapshot

    if settled is None:
        settled = settle(store, plan, facts, use_cache=False)
    store_snapshot(store, plan.code)
    if plan.grid:
        return _record_points(store, plan, settled, max_parallel)
    run_ids: dict[str, str] = {}
    for s in settled:
        if s.reused:
            continue
        pending = {role: {"run": run_ids[ref["stage"]], "output": ref["output"]}
                   for role, ref in s.spec.pending_inputs.items()}
        run_ids[s.stage] = store.create_run(s.spec.with_(pending_inputs=pending))
    return [run_ids[s.stage] for s in settled if s.stage in run_ids]


def _record_points(store: Store, plan: Plan, settled: list[Settled], max_parallel: int | None) -> list[str]:
    from lineage import sweeps as records

    sweep_id = settled[0].spec.sweep["id"]
    records.write(store, sweep_id, {
        "recipe": plan.recipe, "stage": plan.stages[0].stage, "keys": list(plan.grid.keys),
        "overrides": list(plan.grid.overrides), "executor": plan.executor,
        "points": [{"values": v, "run_key": s.spec.run_key} for v, s in zip(plan.grid.values, settled)]})
    runs = {i: s.reused or store.create_run(s.spec) for i, s in enumerate(settled)}
    new = [runs[i] for i, s in enumerate(settled) if not s.reused]
    records.add_submission(store, sweep_id, runs, recorded=new, max_parallel=max_parallel)
    return new
