"""One submit path for every executor: plan -> prepare -> run cache and record (jobs/record.py) -> launch.

Everything a user can get wrong is refused before the store is created or written: the profile,
the recipe's resources, the store path, every stage's config, and every input artifact, re-hashed.
`jobs reproduce` comes this way too, with a plan made from a run's record (`Request.reproduces`),
checked against the image and environment it would run in now, and never served from the run cache.
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
    """`submit`, returning the recorded run IDs too.

    One straight line: the plan and every check read only; the executor prepares; then the one
    writing step (jobs/record.py: run cache, code snapshot, records) and the launch. A code file
    saved while the code is copied redoes only what depends on the code: its hash, the executor's
    preparation (a job names the snapshot's folder) and the run cache's keys."""
    from jobs import executors, profiles
    from jobs.plan import make_plan, plan_from_record, verify_inputs
    from jobs.provenance import CodeChanged, code_state
    from jobs.record import record, settle
    from lineage import Store

    # A named profile is checked with either executor (a typo must not pass silently); its store applies to both.
    profile = profiles.load(req.profile) if req.executor == "slurm" or req.profile else None
    store = Store(store_root(req.store, profile))
    if profile is not None and req.executor == "local" and not req.reproduces:
        echo(_local_profile_note(profile, store.root))
    executor = executors.get(req.executor, profile, allow_unpinned=req.allow_unpinned)
    original = store.run(req.reproduces) if req.reproduces else None
    if original is not None:
        plan = plan_from_record(store, original, req.executor)
    else:
        plan = make_plan(store, req.recipe, req.stages, overrides=req.overrides, inputs=req.inputs, executor=req.executor)
        _notes(plan.notes)
    if req.executor == "slurm" and profile.cpu_kernels:   # the jobs run the profile's kernels, not this host's
        plan = replace(plan, environment={**plan.environment, "cpu_kernels": profile.cpu_kernels})
    for sp in plan.stages:
        profiles.check_resources(sp.resources, f"{sp.recipe}/{sp.stage} in recipe.yaml")
    verify_inputs(store, plan)   # dry runs too: a dry run that passes means the submit would
    if req.dry_run:
        echo(executor.dry_run(store.root, plan))
        return [], True
    extra = {}
    if original is not None:  # the image and packages it would run in now, against the record's
        from jobs.reproduce import settle_drift

        extra = settle_drift(original, plan, executor, req.allow_env_drift, echo)
    prepared = executor.prepare(store.root, plan)
    store = Store.open(store.root, create=True)
    store.ensure_writable()
    for tries in (1, 2, 3):
        facts = [{**p.record, **extra} for p in prepared]
        settled = settle(store, plan, facts, use_cache=not (req.force or req.reproduces))
        try:
            run_ids = record(store, plan, facts, settled)
            break
        except CodeChanged:  # someone saved a file between hashing the code and copying it
            if tries == 3 or original is not None:
                raise
            plan = replace(plan, code=code_state())
            prepared = executor.prepare(store.root, plan)

    _say_reused(store, settled, echo)
    echo(f"recorded {len(run_ids)} run(s) in {store.root}")
    keep = [p for s, p in zip(settled, prepared) if not s.reused]
    with _code_on_path(plan.code.get("root")):
        return run_ids, executor.launch(store, run_ids, keep, echo=echo)


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


def _say_reused(store, settled, echo) -> None:
    """The run cache's hits, each said in a line."""
    for s in settled:
        if s.reused:
            outs = " ".join(f"{k}={v[:16]}" for k, v in store.run(s.reused).outputs.items())
            echo(f"{s.reused}  {s.stage:<9} reused: an identical run already succeeded and its outputs verify ({outs}); "
                 "--force re-runs")
def _notes(lines: list[str]) -> None:
    """The plan's notes (an input taken from its chain, not `:latest`; inputs that mix chains): one line
    each on stderr, so that stdout stays what scripts read."""
    import sys

    for line in lines:
        sys.stderr.write(f"jobs: {line}\n")
