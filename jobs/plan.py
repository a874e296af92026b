"""CLI words -> a Plan: composed configs, resolved inputs, code and environment, per stage.

Nothing here writes to the store: every error a user can cause is raised before a record exists.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from jobs import recipes
from jobs.chains import Chains
from jobs.errors import InputError, RecipeError
from lineage import Store
from lineage.errors import LineageError
from lineage.ids import run_key


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
    notes: list[str] = field(default_factory=list)   # one line each, for stderr: chains chosen or mixed


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
    routed = recipes.split_overrides(overrides, [s.name for s in selected])

    plans, notes = [], []
    chains = Chains(store, recipe, names)
    for spec in selected:
        resolved, upstream = {}, {}
        chooser = chains.start(spec.name)
        for inp in chains.order(spec, explicit):
            given = explicit.get(f"{spec.name}.{inp.role}", explicit.get(inp.role))
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
                            f"stage {spec.name} needs input {inp.role} ({inp.kind}) and no {alias} exists: "
                            f"run `jobs submit {recipe.name} --stage {inp.stage}` first or pass --input {inp.role}=ART"
                        ) from None
                chooser.default(inp.role, resolved[inp.role])
        notes += chooser.finish()
        config = recipes.compose(recipe, spec.name, routed[spec.name])
        _check_config(recipe.name, spec, config)
        plans.append(StagePlan(
            recipe=recipe.name, stage=spec.name, module=spec.module, config=config,
            inputs=resolved, upstream=upstream,
            input_kinds={i.role: i.kind for i in spec.inputs},
            outputs=dict(spec.outputs), resources=dict(spec.resources),
            container=spec.container, ray=spec.ray,
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
    snapshot = s["code"].get("snapshot")
    if not snapshot:
        raise InputError(f"run {view.id} recorded no code snapshot: it cannot be reproduced exactly")
    try:
        store.verify(snapshot)
    except LineageError as e:
        raise InputError(f"run {view.id}: its code snapshot is corrupt, not used: {' '.join(str(e).split())}") from None
    stage = StagePlan(
        recipe=s["recipe"], stage=s["stage"], module=s["module"], config=s["config"], inputs=dict(view.inputs),
        upstream={}, input_kinds=dict(s.get("input_kinds", {})), outputs=dict(s["outputs"]),
        resources=dict(s.get("resources", {})), container=s.get("container"), ray=bool(s.get("ray")))
    code = {**s["code"], "root": store.artifact(snapshot)["path"]}
    return Plan(recipe=s["recipe"], executor=executor, stages=[stage], code=code, environment=python_env())


def _check_config(recipe: str, spec, config: dict) -> None:
    """The stage contract: the module imports, has `run(ctx)`, and its `check_config(config)` (given
    `resources=` too when it takes them) finds no problem. Bad values are refused here, before
    anything is recorded, instead of failing inside the job after a queue wait."""
    import inspect

    from stages.contract import StageModule

    where = f"{recipe}/{spec.name}"
    try:
        module = importlib.import_module(spec.module)
    except ImportError as e:
        raise RecipeError(f"{where}: module {spec.module} cannot be imported here ({type(e).__name__}: {e})") from None
    if not isinstance(module, StageModule) or not callable(module.run):
        raise RecipeError(f"{where}: module {spec.module} has no run(ctx) (stages/contract.py StageModule)")
    check = getattr(module, "check_config", None)
    try:
        if check is None:
            problems = []
        elif "resources" in inspect.signature(check).parameters:
            problems = check(config, resources=dict(spec.resources))
        else:
            problems = check(config)
    except (KeyError, TypeError, AttributeError) as e:  # a section or key the stage needs was removed or retyped
        problems = [f"the config lacks or mistypes {e}"]
    if problems:
        text = "; ".join(" ".join(str(p).split()) for p in problems)
        raise RecipeError(f"{where}: {text}")


def _check_explicit_roles(explicit: dict[str, str], selected: list) -> None:
    for key in explicit:
        stage, _, role = key.rpartition(".")
        ok = any((not stage or s.name == stage) and any(i.role == role for i in s.inputs) for s in selected)
        if not ok:
            roles = sorted({f"{s.name}.{i.role}" for s in selected for i in s.inputs})
            raise InputError(f"--input {key}: no selected stage takes that input (inputs: {', '.join(roles) or 'none'})")


def _resolve(store: Store, text: str, inp: recipes.InputSpec) -> str:
    if text.startswith("swp_"):   # SWEEP:best[METRIC]: the best point's output (jobs/sweep.py)
        from jobs.sweep import best_input

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
    if not spec or "recipe" not in spec or "stage" not in spec:
        return ""
    return f" (run: jobs submit {spec['recipe']} --stage {spec['stage']} --force)"



def _run_body(plan: Plan, i: int, facts: list[dict] | None, inputs: dict, pending: dict) -> dict:
    sp = plan.stages[i]
    return {
        "recipe": sp.recipe, "stage": sp.stage, "module": sp.module, "config": sp.config,
        "inputs": inputs, "pending_inputs": pending,
        "input_kinds": sp.input_kinds, "outputs": sp.outputs, "resources": sp.resources,
        "container": sp.container, "ray": sp.ray, "executor": plan.executor,
        "code": plan.code, "environment": plan.environment,
        **(facts[i] if facts else {}),
    }


def _recorded(plan: Plan, i: int, facts: list[dict] | None, inputs: dict, pending: dict) -> dict:
    """The spec as it is recorded: secrets from the environment redacted (lineage.secrets.redact)."""
    from lineage.secrets import redact

    spec = _run_body(plan, i, facts, inputs, pending)
    spec["config"] = redact(spec["config"])
    return spec


def cached(store: Store, plan: Plan, facts: list[dict] | None = None) -> dict[str, str]:
    """Stages whose exact run already SUCCEEDED and whose outputs still verify: stage -> that run.

    A stage downstream of a reused one is checked with the reused run's outputs as its inputs.
    """
    if not (store.root / "records").exists():
        return {}
    idx = store.index()
    reused: dict[str, str] = {}
    outputs: dict[str, dict] = {}
    for i, sp in enumerate(plan.stages):
        if any(st not in reused for st, _ in sp.upstream.values()):
            continue
        inputs = {**sp.inputs, **{role: outputs[st][out] for role, (st, out) in sp.upstream.items()}}
        key = run_key(_recorded(plan, i, facts, inputs, {}))
        for candidate in idx.runs_with_key(key):
            view = store.run(candidate)
            try:
                for art in view.outputs.values():
                    store.verify(art)
            except LineageError:
                continue
            reused[sp.stage], outputs[sp.stage] = candidate, view.outputs
            break
    return reused


def record(store: Store, plan: Plan, facts: list[dict] | None = None,
           reused: dict[str, str] | None = None) -> list[str]:
    """Write one QUEUED run record per stage not reused; downstream stages point at upstream run IDs.

    `facts` adds the executor's facts per stage (the container digest, the profile) to the records.
    Inputs that come from a reused run are resolved now, to that run's outputs.
    """
    from jobs.provenance import store_snapshot

    reused = reused or {}
    store_snapshot(store, plan.code)
    run_ids: dict[str, str] = {}
    for i, sp in enumerate(plan.stages):
        if sp.stage in reused:
            continue
        inputs, pending = dict(sp.inputs), {}
        for role, (st, out) in sp.upstream.items():
            if st in reused:
                inputs[role] = store.run(reused[st]).outputs[out]
            else:
                pending[role] = {"run": run_ids[st], "output": out}
        spec = _recorded(plan, i, facts, inputs, pending)
        if not pending:
            spec["run_key"] = run_key(spec)
        run_ids[sp.stage] = store.create_run(spec)
    return [run_ids[sp.stage] for sp in plan.stages if sp.stage in run_ids]
