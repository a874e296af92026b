"""CLI words -> a Plan: composed configs, resolved inputs, code and environment, per stage, and
from a plan each stage's run record (`run_spec`). A sweep's plan is one stage's plan with a point per
stage (`Grid`), composed once and each point's values applied to that composition.

Nothing here writes: every error a user can cause is raised before a record exists; the run cache
and the records are jobs/record.py's.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field

from jobs import recipes
from jobs.chains import Chains
from jobs.errors import InputError, RecipeError
from lineage import Store
from lineage.errors import LineageError
from lineage.runspec import RunSpec


@dataclass(frozen=True)
class StagePlan:
    recipe: str
    stage: str
    module: str
    config: dict
    inputs: dict[str, str]                  # role -> artifact ID, resolved now
    upstream: dict[str, tuple[str, str]]    # role -> (stage, output) of a stage in this same submission
    input_kinds: dict[str, str]
    outputs: dict[str, str]                 # output name -> artifact kind
    resources: dict
    container: str | None
    ray: bool


@dataclass(frozen=True)
class Plan:
    recipe: str
    executor: str
    stages: list[StagePlan]
    code: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)   # one line each, for stderr: chains chosen or mixed, a
                                                     # stage's own (`notes(config)`: a warmup it shortens)
    grid: "Grid | None" = None                       # a sweep: `stages` are its points, one stage each


@dataclass(frozen=True)
class Grid:
    """A sweep's points: `Plan.stages[i]` is point i, one run of the same stage with `values[i]` set."""

    keys: list[str]                  # the swept override keys, in grid order
    values: list[dict[str, str]]     # per point: key -> value as the override spells it
    overrides: list[str]             # the overrides every point shares


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        role, sep, value = pair.partition("=")
        if not sep or not role or not value:
            raise InputError(f"bad --input {pair!r}: expected ROLE=ARTIFACT (an art_… ID or NAME:latest)")
        out[role] = value
    return out


def make_plan(store: Store, recipe_name: str, stage_sel: str, *, overrides: list[str] = (),
              inputs: list[str] = (), executor: str = "local") -> Plan:
    """Every stage is imported and checked, dry runs included: stage modules import without GPU
    libraries (tests/recipes/test_stage_contract.py), so a dry run that passes means a submit would."""
    from jobs.provenance import code_state, python_env

    recipe = recipes.load(recipe_name)
    selected = recipe.select(stage_sel)
    if not selected:
        raise RecipeError(f"no stage selected by {stage_sel!r} (stages: {', '.join(recipe.stages)})")
    explicit = parse_inputs(inputs)
    names = {s.name for s in selected}
    _check_explicit_roles(explicit, selected)
    elsewhere = recipes.for_other_stages(list(overrides), recipe, [s.name for s in selected])
    if elsewhere:  # the README's rule: a stage-named key goes to that stage only
        print(f"jobs: note: {' '.join(elsewhere)}: for stage(s) not selected here, so not used", file=sys.stderr)
    routed = recipes.split_overrides([o for o in overrides if o not in elsewhere], [s.name for s in selected])

    plans, notes = [], []
    chains = Chains(store, recipe, names)
    for st in selected:
        resolved, upstream = {}, {}
        config = recipes.compose(recipe, st.name, routed[st.name])
        module = _check_config(recipe.name, st, config)
        # A role this config never reads is neither resolved nor waited for (rl's reward model in a
        # verifier-only GRPO): the stage would otherwise hold its queue slot behind a job it ignores.
        unused = set(getattr(module, "unused_inputs", lambda _: ())(config))
        chooser = chains.start(st.name)
        for inp in chains.order(st, explicit):
            given = explicit.get(f"{st.name}.{inp.role}", explicit.get(inp.role))
            if given is None and inp.role in unused:
                continue
            if given is not None:
                resolved[inp.role] = _resolve(store, given, inp)
                chooser.explicit(inp.role, given, resolved[inp.role])
            elif inp.stage in names:
                upstream[inp.role] = (inp.stage, inp.output)
                chooser.pending(inp.role, inp.stage)
            else:
                alias = f"{recipe.name}/{inp.stage}/{inp.output}:latest"
                picked = chooser.from_chain(inp)
                if picked:
                    resolved[inp.role] = _resolve(store, picked, inp)
                    notes += chooser.differs_from(inp, alias, resolved[inp.role], store)
                else:
                    try:
                        resolved[inp.role] = _resolve(store, alias, inp)
                    except LineageError:
                        raise InputError(
                            f"stage {st.name} needs input {inp.role} ({inp.kind}) and no {alias} exists: "
                            f"run `jobs submit {recipe.name} --stage {inp.stage}` first or pass --input {inp.role}=ART"
                        ) from None
                chooser.default(inp.role, resolved[inp.role])
        notes += chooser.finish()
        notes += [f"note: {recipe.name}/{st.name}: {n}" for n in getattr(module, "notes", lambda _: [])(config)]
        plans.append(StagePlan(
            recipe=recipe.name, stage=st.name, module=st.module, config=config,
            inputs=resolved, upstream=upstream,
            input_kinds={i.role: i.kind for i in st.inputs},
            outputs=dict(st.outputs), resources=dict(st.resources),
            container=st.container, ray=st.ray and getattr(module, "uses_ray", lambda _: True)(config),
        ))
    return Plan(recipe=recipe.name, executor=executor, stages=plans, code=code_state(), environment=python_env(),
                notes=notes)


def plan_from_record(store: Store, view, executor: str) -> Plan:
    """The plan of a recorded run, for `jobs reproduce`: its recipe, stage, resolved config, input
    artifact IDs and code snapshot exactly as recorded, never recomposed from today's recipe files.
    The code runs from the snapshot's folder in the store; the environment is this one (the caller
    compares it with the record)."""
    from jobs.provenance import python_env

    s = view.spec
    snapshot = s.code.get("snapshot") if isinstance(s.code, dict) else None
    if not snapshot:
        raise InputError(f"run {view.id} recorded no code snapshot: it cannot be reproduced exactly")
    check_record_key(store, view)
    try:
        store.verify(snapshot)
    except LineageError as e:
        raise InputError(f"run {view.id}: its code snapshot is corrupt, not used: {' '.join(str(e).split())}") from None
    stage = StagePlan(
        recipe=s.recipe, stage=s.stage, module=s.module, config=s.config, inputs=dict(view.inputs),
        upstream={}, input_kinds=dict(s.input_kinds), outputs=dict(s.outputs),
        resources=dict(s.resources), container=s.container, ray=bool(s.ray))
    code = {**s.code, "root": store.artifact(snapshot)["path"]}
    return Plan(recipe=s.recipe, executor=executor, stages=[stage], code=code, environment=python_env())


def make_sweep_plan(store: Store, recipe_name: str, stage: str, keys: list[str], points: list[dict[str, str]],
                    overrides: list[str], inputs: list[str], executor: str) -> Plan:
    """One stage over a grid: the first point planned as a single run (inputs, code and environment
    resolved once for all points), every point's config from one composition of the stage with its
    own values applied, each checked like a single run's, so one bad value refuses the whole sweep."""
    from dataclasses import replace

    recipe = recipes.load(recipe_name)
    selected = recipe.select(stage)
    if len(selected) != 1:
        raise RecipeError(f"--sweep runs one stage; --stage {stage!r} selects {len(selected)} "
                          f"({', '.join(s.name for s in selected) or 'none'})")
    st = selected[0]
    swept = {k.lstrip("+") for k in keys}
    for key in sorted(swept):   # the same answer for every point, before any is composed
        head = key.split(".")[0]
        if head != st.name and head in recipe.stages:
            raise RecipeError(f"--sweep {key} sets the config of stage {head}, but the sweep runs {st.name}: "
                              f"sweep {st.name}'s keys (or run --stage {head})")
    for text in overrides:
        key = text.split("=", 1)[0].lstrip("+~")
        if key in swept:
            raise RecipeError(f"{key} is both swept (--sweep) and set ({text}): keep one")

    def said(point: dict) -> str:
        return " ".join(f"{k}={v}" for k, v in point.items())

    def refused(point: dict, e: RecipeError) -> RecipeError:
        return RecipeError(f"sweep point {said(point)}: {e}; nothing was submitted")

    first = [f"{k}={v}" for k, v in points[0].items()]
    try:
        plan = make_plan(store, recipe.name, st.name, overrides=[*overrides, *first], inputs=inputs, executor=executor)
    except RecipeError as e:
        raise refused(points[0], e) from None
    elsewhere = recipes.for_other_stages(list(overrides), recipe, [st.name])
    shared = recipes.split_overrides([o for o in overrides if o not in elsewhere], [st.name])[st.name]
    compose = recipes.composer(recipe, st.name, shared)
    stages = [plan.stages[0]]
    for point in points[1:]:
        try:
            config = compose([f"{k}={v}" for k, v in point.items()])
            _check_config(recipe.name, st, config)
        except RecipeError as e:
            raise refused(point, e) from None
        stages.append(replace(plan.stages[0], config=config))
    return replace(plan, stages=stages, grid=Grid(keys=list(keys), values=list(points), overrides=list(overrides)))


def check_record_key(store: Store, view) -> None:
    """A record must still hash to the run key it was recorded with (at submit, or in the event that
    filled its pending inputs): a record edited since (its config, an input, the module, the stage,
    the code or the environment) is refused before anything runs it."""
    recorded = view.spec.run_key or next((e.get("run_key") for e in store.events(view.id)
                                          if e.get("kind") == "inputs" and e.get("run_key")), None)
    if not recorded:
        raise InputError(f"run {view.id} records no run key to check its record against: it is not reproduced")
    try:
        now = view.spec.with_(inputs=dict(view.inputs)).key()
    except (KeyError, TypeError, AttributeError, ValueError):   # a field retyped by hand
        now = None
    if now != recorded:
        raise InputError(f"run {view.id}: its record no longer hashes to the run key it was recorded with "
                         f"({recorded[:23]}): the config, an input, the module, the stage, the code or the "
                         f"environment was changed after it was recorded; it is not reproduced")


def _check_config(recipe: str, st, config: dict):
    """The stage contract: the module imports, has `run(ctx)`, and its `check_config(config)` (given
    `resources=` too when it takes them) finds no problem. Bad values are refused here, before
    anything is recorded, instead of failing inside the job after a queue wait. Returns the module."""
    import inspect

    from stages.contract import StageModule

    where = f"{recipe}/{st.name}"
    try:
        module = importlib.import_module(st.module)
    except ImportError as e:
        raise RecipeError(f"{where}: module {st.module} cannot be imported here ({type(e).__name__}: {e})") from None
    if not isinstance(module, StageModule) or not callable(module.run):
        raise RecipeError(f"{where}: module {st.module} has no run(ctx) (stages/contract.py StageModule)")
    check = getattr(module, "check_config", None)
    try:
        if check is None:
            problems = []
        elif "resources" in inspect.signature(check).parameters:
            problems = check(config, resources=dict(st.resources))
        else:
            problems = check(config)
    except (KeyError, TypeError, AttributeError) as e:  # a section or key the stage needs was removed or retyped
        problems = [f"the config lacks or mistypes {e}"]
    from stages.ml import tracking

    problems = [*problems, *tracking.check_config(config)]   # every stage reports through the trackers
    if problems:
        text = "; ".join(" ".join(str(p).split()) for p in problems)
        raise RecipeError(f"{where}: {text}")
    return module


def _check_explicit_roles(explicit: dict[str, str], selected: list) -> None:
    for key in explicit:
        stage, _, role = key.rpartition(".")
        ok = any((not stage or s.name == stage) and any(i.role == role for i in s.inputs) for s in selected)
        if not ok:
            roles = sorted({f"{s.name}.{i.role}" for s in selected for i in s.inputs})
            raise InputError(f"--input {key}: no selected stage takes that input (inputs: {', '.join(roles) or 'none'})")


def _resolve(store: Store, text: str, inp: recipes.RecipeInput) -> str:
    from lineage.sweeps import is_sweep

    if is_sweep(text):   # SWEEP:best[METRIC]: the best point's output, as the records say (jobs/grid.py)
        from jobs.grid import best_input

        return best_input(store, text, inp.kind)
    art_id = store.resolve_artifact(text)
    kind = store.artifact(art_id).get("kind")
    if kind != inp.kind:
        raise InputError(f"input {inp.role} must be a {inp.kind} artifact, but {text} is a {kind}")
    return art_id


def verify_inputs(store: Store, plan: Plan) -> None:
    """Re-hash every input artifact the plan resolved, before anything is recorded: a tampered or
    damaged input is refused in one line naming the file and the command that heals it."""
    seen: set[str] = set()
    for sp in plan.stages:
        for role, art in sorted(sp.inputs.items()):
            if art in seen:
                continue
            seen.add(art)
            try:
                store.verify(art)
            except LineageError as e:
                raise InputError(f"stage {sp.stage}: input {role} is corrupt, not used: {' '.join(str(e).split())}"
                                 f"{_heal_hint(store, art)}") from None


def _heal_hint(store: Store, art: str) -> str:
    """`jobs submit … --force` for the stage that produced `art`, when the record names it."""
    try:
        producer = store.artifact(art).get("producer")
        spec = store.run_spec(producer) if producer else None
    except (LineageError, OSError, ValueError):
        return ""
    if not spec or not spec.recipe or not spec.stage:
        return ""
    return f" (run: jobs submit {spec.recipe} --stage {spec.stage} --force)"


def run_spec(plan: Plan, i: int, facts: list[dict] | None, inputs: dict, pending: dict) -> RunSpec:
    """Stage `i`'s run record as it is written: secrets from the environment redacted
    (lineage.secrets.redact), the executor's facts added."""
    from lineage.secrets import redact

    sp = plan.stages[i]
    return RunSpec(
        recipe=sp.recipe, stage=sp.stage, module=sp.module, config=redact(sp.config),
        inputs=inputs, pending_inputs=pending,
        input_kinds=sp.input_kinds, outputs=sp.outputs, resources=sp.resources,
        container=sp.container, ray=sp.ray, executor=plan.executor,
        code=plan.code, environment=plan.environment,
        **(facts[i] if facts else {}),
    )
