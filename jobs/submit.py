"""The one submit path, for one run, a chain, a sweep and a reproduction: plan -> prepare -> run
cache and record (jobs/record.py) -> launch.

A request carries its points: a single run or a chain is one point; a sweep (`--sweep`) is a point
per combination of its values, one stage each (jobs/plan.py `make_sweep_plan`); a reproduction
(`Request.reproduces`) is one point, the plan made from a run's record, checked against the image
and environment it would run in now (jobs/drift.py) and never served from the run cache. Every one
goes down the same line, and the executor decides how to run the points it is given (a chain in
order; a sweep's independent points on Slurm as one job array).

Everything a user can get wrong is refused before the store is created or written: the profile,
the recipe's resources, the store path, every point's config, and every input artifact, re-hashed.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

DEFAULT_STORE = "~/.jobs"


@dataclass(frozen=True)
class Request:
    """What the user asked for, as the CLI parsed it."""

    recipe: str
    stages: str                                  # a stage, a comma list, or "all"
    overrides: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)   # ROLE=ART or STAGE.ROLE=ART
    executor: str = "local"
    profile: str | None = None
    store: str | None = None                     # --store; else $JOBS_HOME, the profile's, ~/.jobs
    dry_run: bool = False
    force: bool = False                          # run even if an identical run already succeeded
    allow_unpinned: bool = False
    reproduces: str | None = None                # a run ID: plan from its record (`jobs reproduce`), not the recipe
    allow_env_drift: bool = False                # with reproduces: run even if the image or packages moved
    sweep: list[str] = field(default_factory=list)   # --sweep KEY=V1,V2: a point per combination of the values
    max_parallel: int | None = None              # with sweep: at most this many points at once


@dataclass(frozen=True)
class Submitted:
    """What a submission recorded and how its launch went."""

    runs: list[str] = field(default_factory=list)   # the runs recorded now, in point (or chain) order
    ok: bool = True                                 # False when a local run failed
    sweep: str | None = None                        # the sweep's ID, for a sweep


def store_root(explicit: str | None, profile=None) -> Path:
    """--store, else $JOBS_HOME, else the profile's store, else ~/.jobs; no control characters (the
    path reaches sbatch scripts and log paths: a newline would start a live script line)."""
    from jobs.errors import JobsError

    root = Path(explicit or os.environ.get("JOBS_HOME") or (profile and profile.store) or DEFAULT_STORE).expanduser()
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in str(root)):
        raise JobsError(f"store path {str(root)!r} has a control character (newline, tab, ...); choose another folder")
    return root


def submit(req: Request, echo: Callable[[str], None] = print) -> Submitted:
    """Run (local) or submit (slurm) the request's points.

    One straight line: the plan and every check read only; the executor prepares; then the one
    writing step (jobs/record.py: run cache, code snapshot, records) and the launch. A code file
    saved while the code is copied redoes only what depends on the code: its hash, the executor's
    preparation (a job names the snapshot's folder) and the run cache's keys."""
    from jobs import executors, profiles
    from jobs.errors import ExecutorError
    from jobs.plan import verify_inputs
    from jobs.provenance import CodeChanged, code_state
    from jobs.record import record, settle
    from lineage import Store

    if req.max_parallel is not None and not req.sweep:
        raise ExecutorError("--max-parallel limits a sweep: give --sweep KEY=V1,V2 too")
    if req.max_parallel is not None and req.max_parallel < 1:
        raise ExecutorError(f"--max-parallel must be at least 1 (got {req.max_parallel})")
    # A named profile is checked with either executor (a typo must not pass silently); its store applies to both.
    profile = profiles.load(req.profile) if req.executor == "slurm" or req.profile else None
    store = Store(store_root(req.store, profile))
    if profile is not None and req.executor == "local" and not req.reproduces:
        echo(_local_profile_note(profile, store.root))
    executor = executors.get(req.executor, profile, allow_unpinned=req.allow_unpinned)
    original = store.run(req.reproduces) if req.reproduces else None
    plan = _plan(req, store, original)
    if req.executor == "slurm" and profile.cpu_kernels:   # the jobs run the profile's kernels, not this host's
        plan = replace(plan, environment={**plan.environment, "cpu_kernels": profile.cpu_kernels})
    for sp in plan.stages[:1] if plan.grid else plan.stages:   # a sweep's points share their stage's resources
        profiles.check_resources(sp.resources, f"{sp.recipe}/{sp.stage} in recipe.yaml")
    verify_inputs(store, plan)   # dry runs too: a dry run that passes means the submit would
    if req.dry_run:
        if plan.grid:
            from jobs.grid import said

            echo(f"# sweep of {len(plan.stages)} point(s) of {plan.recipe}/{plan.stages[0].stage}")
            echo("\n".join(f"#   point {i}: {said(p)}" for i, p in enumerate(plan.grid.values)))
        echo(executor.dry_run(store.root, plan, max_parallel=req.max_parallel))
        return Submitted()
    extra = {}
    if original is not None:  # the image and packages it would run in now, against the record's
        from jobs.drift import settle_drift

        extra = settle_drift(original, plan, executor, req.allow_env_drift, echo)
    prepared = _prepare(executor, store.root, plan)
    store = Store.open(store.root, create=True)
    store.ensure_writable()
    for tries in (1, 2, 3):
        facts = [{**p.record, **extra} for p in prepared]
        settled = settle(store, plan, facts, use_cache=not (req.force or req.reproduces))
        try:
            run_ids = record(store, plan, facts, settled, max_parallel=req.max_parallel)
            break
        except CodeChanged:  # someone saved a file between hashing the code and copying it
            if tries == 3 or original is not None:
                raise
            plan = replace(plan, code=code_state())
            prepared = _prepare(executor, store.root, plan)

    sweep = _say_settled(store, plan, settled, run_ids, echo)
    keep = [p for s, p in zip(settled, prepared) if not s.reused]
    if not run_ids:
        return Submitted(sweep=sweep)
    with _code_on_path(plan.code.get("root")):
        ok = executor.launch(store, run_ids, keep, echo=echo, max_parallel=req.max_parallel)
    return Submitted(run_ids, ok, sweep)


def _plan(req: Request, store, original):
    """The request's points as a plan, reading only: a reproduction's from its record, a sweep's from
    one composition of its stage, a run's or a chain's from the recipe."""
    from jobs.plan import make_plan, make_sweep_plan, plan_from_record

    if original is not None:
        return plan_from_record(store, original, req.executor)
    if req.sweep:
        from jobs import grid

        axes = grid.parse(req.sweep, grid.max_points(req.executor))
        plan = make_sweep_plan(store, req.recipe, req.stages, [a.key for a in axes], grid.grid(axes),
                               req.overrides, req.inputs, req.executor)
    else:
        plan = make_plan(store, req.recipe, req.stages, overrides=req.overrides, inputs=req.inputs,
                         executor=req.executor)
    _notes(plan.notes)
    return plan


def _prepare(executor, store_root: Path, plan) -> list:
    """The executor's preparation of every stage; a sweep's points share their stage, so the executor
    checks one point per distinct set of needs (the modules its image must have) and the others take
    that point's facts."""
    if plan.grid is None:
        return executor.prepare(store_root, plan)
    needs = [_needs(sp) for sp in plan.stages]
    first: dict[tuple, int] = {}
    for i, need in enumerate(needs):
        first.setdefault(need, i)
    reps = sorted(set(first.values()))
    done = dict(zip(reps, executor.prepare(store_root, replace(plan, stages=[plan.stages[i] for i in reps]))))
    return [done[first[need]] for need in needs]


def _needs(sp) -> tuple:
    from dataclasses import asdict

    from runtime.image import needs

    return tuple(needs(asdict(sp)))


def _local_profile_note(profile, root: Path) -> str:
    """What a profile means for a local run: its store, if it names one; its Slurm settings do nothing."""
    from dataclasses import fields

    unset = type(profile)()
    slurm = [f.name for f in fields(profile) if f.name not in ("name", "store")
             and getattr(profile, f.name) != getattr(unset, f.name)]
    if profile.store and Path(profile.store).expanduser() == root:
        used = f"its store {profile.store} is used"
    else:
        used = "nothing of it is used" + (f" (its store gives way to {root})" if profile.store else "")
    ignored = f"; its {', '.join(slurm)} apply to --executor slurm only" if slurm else ""
    return f"note: --profile {profile.name} with the local executor: {used}{ignored}"


@contextmanager
def _code_on_path(root: str | None):
    """The jobs import the code the plan names: a reproduction's snapshot goes first on PYTHONPATH,
    which local jobs inherit and sbatch exports; a submission of this checkout changes nothing."""
    from jobs.provenance import PROJECT_ROOT

    saved = os.environ.get("PYTHONPATH")
    if not root or Path(root) == PROJECT_ROOT:
        yield
        return
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(root), saved] if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _say_settled(store, plan, settled, run_ids: list[str], echo) -> str | None:
    """The run cache's hits and a sweep's points still running from an earlier submission, each in a
    line, then what was recorded; a sweep's ID, for a sweep."""
    if plan.grid is None:
        for s in settled:
            if s.reused:
                outs = " ".join(f"{k}={v[:16]}" for k, v in store.run(s.reused).outputs.items())
                echo(f"{s.reused}  {s.stage:<9} reused: an identical run already succeeded and its outputs verify "
                     f"({outs}); --force re-runs")
        echo(f"recorded {len(run_ids)} run(s) in {store.root}")
        return None
    from jobs.grid import said

    values = plan.grid.values
    sweep = settled[0].spec.sweep["id"]
    for i, s in enumerate(settled):
        if s.standing:
            echo(f"{s.reused}  point {i} still {store.run(s.reused).state} (as recorded) from an earlier "
                 f"submission ({said(values[i])})")
        elif s.reused:
            echo(f"{s.reused}  point {i} reused: an identical run already succeeded ({said(values[i])})")
    todo = [i for i, s in enumerate(settled) if not s.reused]
    echo(f"sweep {sweep}: {len(values)} point(s), {len(todo)} to run, {len(values) - len(todo)} reused "
         f"or still running; recorded {len(run_ids)} run(s) in {store.root}")
    for i, run in zip(todo, run_ids):   # which run is which point, before the launch lines that name runs only
        echo(f"{run}  point {i}: {said(values[i])}")
    return sweep


def _notes(lines: list[str]) -> None:
    """The plan's notes (an input taken from its chain, not `:latest`; inputs that mix chains): one line
    each on stderr, so that stdout stays what scripts read."""
    import sys

    for line in lines:
        sys.stderr.write(f"jobs: {line}\n")
