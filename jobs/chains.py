"""One chain per stage: a stage's default inputs come from the runs its other inputs descend from.

An artifact's ancestry is the set of runs upstream of it, by (recipe, stage). Two inputs agree when,
for every stage both descend from, some run of that stage is upstream of both (identical bytes made
by several runs count as made by each). `:latest` alone would pair a model with data made after it
by another data run; here eval's data is taken from the data run its model descends from, SFT's data
from the data run its pretrained model read, and mixing chains takes an explicit `--input`, which is
warned in one line naming both sides.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lineage.errors import LineageError
from lineage.layout import RECORDS

Ancestry = dict[tuple[str, str], set[str]]   # (recipe, stage) -> runs of that stage upstream


def ancestry(idx, art: str, cache: dict[str, Ancestry] | None = None) -> Ancestry:
    """Every run upstream of `art` (its own producers included), by (recipe, stage)."""
    if cache is not None and art in cache:
        return cache[art]
    from lineage.graph import walk

    found: Ancestry = {}
    nodes, _ = walk(idx, [art], downstream=False)
    for run in (n for n, what in nodes.items() if what == "run"):
        row = idx.run_row(run)
        if row is not None:
            found.setdefault((row["recipe"], row["stage"]), set()).add(run)
    if cache is not None:
        cache[art] = found
    return found


def merge(parts: list[Ancestry]) -> Ancestry:
    """The runs every part agrees on, per stage (a stage where they disagree keeps them all)."""
    out: Ancestry = {}
    for part in parts:
        for key, runs in part.items():
            if key not in out:
                out[key] = set(runs)
            else:
                both = out[key] & runs
                out[key] = both or out[key] | runs
    return out


def clash(a: Ancestry, b: Ancestry) -> tuple[str, str, str, str] | None:
    """The first stage both descend from through different runs: (recipe, stage, run of a, run of b)."""
    for key in sorted(a.keys() & b.keys()):
        if not a[key] & b[key]:
            return key[0], key[1], min(a[key]), min(b[key])
    return None


@dataclass
class Chooser:
    """Chooses one stage's default inputs from the chain of those already chosen."""

    idx: object
    context: list[Ancestry] = field(default_factory=list)
    cache: dict[str, Ancestry] = field(default_factory=dict)

    def add(self, art: str) -> Ancestry:
        anc = ancestry(self.idx, art, self.cache)
        self.context.append(anc)
        return anc

    def from_chain(self, recipe: str, stage: str, output: str) -> tuple[str, str] | None:
        """(artifact, run) of `stage`'s `output` from the chain chosen so far: the newest run of that
        stage the chain agrees on that succeeded and made it (several agree when they made the same
        bytes the chain read, e.g. a data run that changed only the eval split: the newest is taken)."""
        runs = merge(self.context).get((recipe, stage), set())
        for run in sorted(runs, reverse=True):
            row = self.idx.run_row(run)
            if row is None or row["state"] != "SUCCEEDED":
                continue
            made = {e["role"]: e["artifact"] for e in self.idx.edges_of(run, "out")}
            if output in made:
                return made[output], run
        return None


def describe(idx, art: str) -> str:
    """An artifact as a user names it: its own NAME:vN, else its short ID."""
    own = own_name(idx, art)
    return own or art[:16]


def own_name(idx, art: str) -> str | None:
    """The version the artifact was first registered under: a later run (or add) of the same bytes
    adds a newer version, which is not what the artifact was made as."""
    names = idx.refs_of(art)
    if not names:
        return None
    return f"{names[0]['name']}:v{names[0]['version']}"


def mixing_warning(idx, stage: str, sides: dict[str, tuple[str, Ancestry]], explicit: set[str]) -> str | None:
    """One line when two of a stage's inputs descend from different runs of one stage, else None.
    `sides`: role -> (what the input is, as shown; its ancestry)."""
    roles = sorted(sides, key=lambda r: (r not in explicit, r))
    for i, ra in enumerate(roles):
        for rb in roles[i + 1:]:
            hit = clash(sides[ra][1], sides[rb][1])
            if hit:
                recipe, up, run_a, run_b = hit
                return (f"warning: {stage}'s inputs mix chains: {ra} {sides[ra][0]} descends from {recipe}/{up} run "
                        f"{run_a[:13]}, {rb} {sides[rb][0]} from {recipe}/{up} run {run_b[:13]}")
    return None


# ---- used by jobs/plan.py while it resolves a submission's inputs ---------------------------------
class Chains:
    """Default inputs follow the chain of a stage's other inputs (this module); nothing to follow
    in a store with no records yet."""

    def __init__(self, store, recipe, names: set[str]):
        self.store, self.recipe, self.names = store, recipe, names
        self.idx = store.index() if (store.root / RECORDS).is_dir() else None
        self.contexts: dict[str, list] = {}
        self.depth = {name: i for i, name in enumerate(recipe.stages)}

    def order(self, spec, explicit: dict[str, str]) -> list:
        """Given inputs first, then inputs from this submission, then defaults from the deepest
        upstream stage up: eval's model is chosen before its data, which then follows the model."""
        def key(inp):
            given = f"{spec.name}.{inp.role}" in explicit or inp.role in explicit
            return (not given, inp.stage not in self.names, -self.depth.get(inp.stage, 0))
        return sorted(spec.inputs, key=key)

    def start(self, stage: str) -> "StageChain":
        return StageChain(self, stage)


class StageChain:
    def __init__(self, chains: Chains, stage: str):
        self.chains, self.stage = chains, stage
        self.chooser = Chooser(chains.idx) if chains.idx is not None else None
        self.sides: dict[str, tuple[str, dict]] = {}
        self.given: set[str] = set()

    def explicit(self, role: str, text: str, art: str) -> None:
        self.given.add(role)
        if self.chooser:
            self.sides[role] = (text, self.chooser.add(art))

    def default(self, role: str, art: str) -> None:
        if self.chooser:
            self.sides[role] = (describe(self.chooser.idx, art), self.chooser.add(art))

    def pending(self, role: str, stage: str) -> None:
        if self.chooser:
            anc = merge(self.chains.contexts.get(stage, []))
            self.chooser.context.append(anc)
            self.sides[role] = (f"(from {stage} of this submission)", anc)

    def from_chain(self, inp) -> str | None:
        if not self.chooser:
            return None
        picked = self.chooser.from_chain(self.chains.recipe.name, inp.stage, inp.output)
        return picked[0] if picked else None

    def differs_from(self, inp, alias: str, art: str, store) -> list[str]:
        """A note when the chain's artifact is not `:latest`: the user sees what was chosen and why."""
        try:
            latest = store.resolve_artifact(alias)
        except LineageError:
            return []
        if latest == art:
            return []
        shown = describe(self.chooser.idx, art)
        newest = describe(self.chooser.idx, latest)
        return [f"note: {self.stage} input {inp.role} = {shown}, from the chain of its other inputs, not "
                f"{alias} ({newest}, of another chain; --input {inp.role}={alias} to use it anyway)"]

    def finish(self) -> list[str]:
        if not self.chooser:
            return []
        self.chains.contexts[self.stage] = list(self.chooser.context)
        line = mixing_warning(self.chooser.idx, self.stage, self.sides, self.given)
        return [line] if line else []


# ---- `jobs report RECIPE`: one consistent chain of successful runs -------------------------------
def recipe_chain(store, idx, recipe_name: str) -> tuple[dict[str, str], list[str]]:
    """(stage -> run, stages left out): the newest successful run of the recipe's last stage that has
    one, the runs it descends from, and for every other stage its newest successful run whose inputs
    are outputs of the runs chosen for the stages they come from. A failed, cancelled or other-chain
    run is never part of it."""
    from jobs import recipes

    recipe = recipes.load(recipe_name)
    ok = {s: [r["id"] for r in idx.runs(recipe=recipe_name, stage=s) if r["state"] == "SUCCEEDED"]
          for s in recipe.stages}
    chosen: dict[str, str] = {}
    cache: dict[str, Ancestry] = {}
    for stage in reversed(list(recipe.stages)):      # the anchor: newest first, inputs of one chain
        for run in ok[stage]:
            parts = [ancestry(idx, a, cache) for a in store.run(run).inputs.values()]
            if any(clash(a, b) for i, a in enumerate(parts) for b in parts[i + 1:]):
                continue                             # its inputs mix chains: not a chain to show
            chosen[stage] = run
            for (rec, up), runs in merge(parts).items():   # upstream: of identical bytes, the newest success
                good = [r for r in sorted(runs, reverse=True) if (idx.run_row(r) or {"state": None})["state"] == "SUCCEEDED"]
                if rec == recipe_name and good and up not in chosen:
                    chosen[up] = good[0]
            break
        if chosen:
            break
    if not chosen:
        return {}, list(recipe.stages)

    def fits(stage: str, run: str) -> bool:
        inputs = store.run(run).inputs
        for inp in recipe.stages[stage].inputs:
            if inp.stage in chosen:
                made = {e["artifact"] for e in idx.edges_of(chosen[inp.stage], "out") if e["role"] == inp.output}
                if inputs.get(inp.role) not in made:
                    return False
        return True

    for stage in recipe.stages:
        if stage not in chosen:
            pick = next((r for r in ok[stage] if fits(stage, r)), None)
            if pick:
                chosen[stage] = pick
    return chosen, [s for s in recipe.stages if s not in chosen]
