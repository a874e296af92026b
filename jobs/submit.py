"""One submit path for every executor: plan -> prepare -> run cache -> record -> launch.

Everything a user can get wrong is refused before the store is created or written: the profile,
the recipe's resources, the store path, every stage's config, and every input artifact, re-hashed.
`jobs reproduce` comes this way too, with a plan made from a run's record (`Request.reproduces`),
checked against the image and environment it would run in now, and never served from the run cache.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
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


def store_root(explicit: str | None, profile=None) -> Path:
    """--store, else $JOBS_HOME, else the profile's store, else ~/.jobs; no control characters (the
    path reaches sbatch scripts and log paths: a newline would start a live script line)."""
    from jobs.errors import JobsError

    root = Path(explicit or os.environ.get("JOBS_HOME") or (profile and profile.store) or DEFAULT_STORE).expanduser()
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in str(root)):
        raise JobsError(f"store path {str(root)!r} has a control character (newline, tab, ...); choose another folder")
    return root


def submit(req: Request, echo: Callable[[str], None] = print) -> bool:
    """Run (local) or submit (slurm) the request; False when a local stage failed."""
    return submit_runs(req, echo)[1]


def submit_runs(req: Request, echo: Callable[[str], None] = print) -> tuple[list[str], bool]:
    """`submit`, returning the recorded run IDs too."""
    from jobs import executors, profiles
    from jobs.plan import make_plan, plan_from_record, record, verify_inputs
    from jobs.provenance import CodeChanged, store_snapshot
    from lineage import Store

    # A named profile is checked with either executor (a typo must not pass silently); its store applies to both.
    profile = profiles.load(req.profile) if req.executor == "slurm" or req.profile else None
    store = Store(store_root(req.store, profile))
    executor = executors.get(req.executor, profile, allow_unpinned=req.allow_unpinned)
    for tries in (1, 2, 3):
        if req.reproduces:
            plan = plan_from_record(store, store.run(req.reproduces), req.executor)
        else:
            plan = make_plan(store, req.recipe, req.stages, overrides=req.overrides, inputs=req.inputs, executor=req.executor)
            if tries == 1:
                _notes(plan.notes)
        for sp in plan.stages:
            profiles.check_resources(sp.resources, f"{sp.recipe}/{sp.stage} in recipe.yaml")
        verify_inputs(store, plan)   # dry runs too: a dry run that passes means the submit would
        if req.dry_run:
            echo(executor.dry_run(store.root, plan))
            return [], True
        extra = {}
        if req.reproduces:  # the image and packages it would run in now, against the record's
            from jobs.reproduce import settle_drift

            extra = settle_drift(store.run(req.reproduces), plan, executor, req.allow_env_drift, echo)
        prepared = executor.prepare(store.root, plan)
        facts = [{**p.record, **extra} for p in prepared]
        store = Store.open(store.root, create=True)
        store.ensure_writable()
        try:
            store_snapshot(store, plan.code)
            break
        except CodeChanged:  # someone saved a file between planning and copying: plan again
            if tries == 3:
                raise

    reused = {} if req.force or req.reproduces else _reuse(store, plan, facts, echo)
    run_ids = record(store, plan, facts=facts, reused=reused)
    echo(f"recorded {len(run_ids)} run(s) in {store.root}")
    keep = [p for sp, p in zip(plan.stages, prepared) if sp.stage not in reused]
    with _code_on_path(plan.code.get("root")):
        return run_ids, executor.launch(store, run_ids, keep, echo=echo)


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


def _reuse(store, plan, facts: list[dict], echo) -> dict[str, str]:
    """The run cache: the stages an identical, verified, SUCCEEDED run covers, each said in a line."""
    from jobs.plan import cached

    reused = cached(store, plan, facts)
    for stage, run_id in reused.items():
        outs = " ".join(f"{k}={v[:16]}" for k, v in store.run(run_id).outputs.items())
        echo(f"{run_id}  {stage:<9} reused: an identical run already succeeded and its outputs verify ({outs}); --force re-runs")
    return reused


def _notes(lines: list[str]) -> None:
    """The plan's notes (an input taken from its chain, not `:latest`; inputs that mix chains): one line
    each on stderr, so that stdout stays what scripts read."""
    import sys

    for line in lines:
        sys.stderr.write(f"jobs: {line}\n")
