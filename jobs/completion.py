"""Tab completion of `jobs`: the candidates argcomplete offers for each argument (commands, recipes,
stages, input roles, aliases, config keys, kinds), from the argparse parser and the completers below.

jobs/cli.py calls `complete` when the shell asks (`_ARGCOMPLETE` is set); jobs/shell.py writes the
shell function and argcomplete's hook that ask.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path


# --- completers: argcomplete calls each with the word typed so far and the arguments parsed before it


def _quiet(func):
    """A completer that finds nothing rather than failing: a half-typed line is not an error."""
    def complete(prefix: str = "", parsed_args=None, **_) -> list[str]:
        try:
            return [w for w in func(prefix, parsed_args) if w.startswith(prefix)]
        except Exception:
            return []
    return complete


def _recipe(parsed_args):
    from jobs import recipes

    return recipes.load(parsed_args.recipe)


@_quiet
def recipe_names(prefix, parsed_args):
    from jobs import recipes

    return recipes.available()


@_quiet
def stage_names(prefix, parsed_args):
    """A stage, 'all', or the next item of a comma list (`data,pre<TAB>`)."""
    head, _, _ = prefix.rpartition(",")
    names = list(_recipe(parsed_args).stages)
    if head:
        return [f"{head},{s}" for s in names if s not in head.split(",")]
    return [*names, "all"]


def _store_names(parsed_args) -> list[str]:
    """Every alias name in the store, read without opening or creating anything."""
    return _store(parsed_args).alias_names()


def _store(parsed_args):
    """The store, as a plain object: reading its records opens no index and creates nothing."""
    from jobs.submit import store_root
    from lineage import Store

    return Store(store_root(getattr(parsed_args, "store", None)))


def _kind_of(store, name: str) -> str | None:
    """The kind of the artifact `name:latest` names (two small records read), None when unreadable."""
    from lineage.errors import LineageError

    try:
        return store.artifact(store.resolve_artifact(f"{name}:latest")).get("kind")
    except (LineageError, OSError, ValueError, KeyError):
        return None


def _record_ids(parsed_args, kind: str) -> list[str]:
    """The IDs of one kind of record (`run`, `sweep`), newest run first."""
    return _store(parsed_args).record_ids(kind)


@_quiet
def aliases(prefix, parsed_args):
    return [f"{n}:latest" for n in _store_names(parsed_args)]


@_quiet
def run_ids(prefix, parsed_args):
    return _record_ids(parsed_args, "run")


@_quiet
def sweep_ids(prefix, parsed_args):
    return _record_ids(parsed_args, "sweep")


@_quiet
def runs_or_sweeps(prefix, parsed_args):
    return [*_record_ids(parsed_args, "run"), *_record_ids(parsed_args, "sweep")]


@_quiet
def anything(prefix, parsed_args):
    """What `show`, `lineage`, `report` take: a run, an alias (and `report`, a sweep or a recipe)."""
    from jobs import recipes

    words = [*_record_ids(parsed_args, "run"), *(f"{n}:latest" for n in _store_names(parsed_args))]
    if getattr(parsed_args, "command", None) == "report":
        words += [*_record_ids(parsed_args, "sweep"), *recipes.available()]
    return words


@_quiet
def input_pairs(prefix, parsed_args):
    """`ROLE=` for the input roles of the stages `--stage` selected (all when none is given yet), then
    `ROLE=NAME:latest` for the store's names whose artifact is of the role's kind, and `ROLE=SWEEP:best[`."""
    recipe = _recipe(parsed_args)
    roles: dict[str, set[str]] = {}
    for stage in _selected(parsed_args):
        for i in recipe.stages[stage].inputs:
            roles.setdefault(i.role, set()).add(i.kind)
            roles.setdefault(f"{stage}.{i.role}", set()).add(i.kind)
    role, eq, _ = prefix.partition("=")
    if not eq:
        short = sorted(f"{r}=" for r in roles if "." not in r)
        return short if short or "." in prefix else sorted(f"{r}=" for r in roles)
    store, want = _store(parsed_args), roles.get(role, set())
    names = [n for n in _store_names(parsed_args) if _kind_of(store, n) in want]
    return [*(f"{role}={n}:latest" for n in names), *(f"{role}={s}:best[" for s in _record_ids(parsed_args, "sweep"))]


@_quiet
def stages_known(prefix, parsed_args):
    """`list --stage`, `compare --stage`: the stages of `--recipe` (or of every recipe)."""
    from jobs import recipes

    names = [parsed_args.recipe] if getattr(parsed_args, "recipe", None) else recipes.available()
    return sorted({s for n in names for s in recipes.load(n).stages})


def _selected(parsed_args) -> list[str]:
    recipe = _recipe(parsed_args)
    sel = getattr(parsed_args, "stage", None) or []
    return [s.name for s in recipe.select(",".join(sel))] if sel and "all" not in sel else list(recipe.stages)


def _leaves(config: dict, head: str = "") -> list[str]:
    out = []
    for k, v in config.items():
        key = f"{head}.{k}" if head else str(k)
        out += _leaves(v, key) if isinstance(v, dict) and v else [key]
    return out


@_quiet
def config_keys(prefix, parsed_args):
    """`KEY=` for every leaf of the selected stages' composed configs (all stages when none given)."""
    from jobs import recipes

    recipe = _recipe(parsed_args)
    keys = set()
    for stage in _selected(parsed_args):
        keys.update(_leaves(recipes.compose(recipe, stage, [])))
    return sorted(f"{k}=" for k in keys)


@_quiet
def kinds(prefix, parsed_args):
    from jobs import recipes

    return sorted({k for name in recipes.available() for s in recipes.load(name).stages.values()
                   for k in s.outputs.values()})


@_quiet
def profile_names(prefix, parsed_args):
    import yaml

    from jobs.profiles import PROFILES_FILE

    path = Path(os.environ.get("JOBS_PROFILES") or PROFILES_FILE).expanduser()
    return sorted(yaml.safe_load(path.read_text()) or {})


@_quiet
def failure_classes(prefix, parsed_args):
    """`list --failed`: the failure classes (lineage/failures.py)."""
    from lineage.failures import CLASSES

    return list(CLASSES)


COMPLETERS = {   # (subcommand, dest) -> completer; None: every subcommand with that dest
    ("submit", "recipe"): recipe_names, ("submit", "stage"): stage_names, ("submit", "input"): input_pairs,
    ("submit", "overrides"): config_keys, (None, "profile"): profile_names, (None, "kind"): kinds,
    (None, "recipe"): recipe_names, ("show", "id"): anything, ("lineage", "id"): anything,
    ("report", "id"): anything, ("export", "id"): anything, ("verify", "id"): aliases,
    ("list", "stage"): stages_known, ("compare", "stage"): stages_known, ("list", "sweep"): sweep_ids,
    ("list", "failed"): failure_classes,
    ("compare", "runs"): runs_or_sweeps, ("status", "run"): runs_or_sweeps, ("cancel", "run"): runs_or_sweeps,
    ("logs", "run"): run_ids, ("reproduce", "run"): run_ids, ("pin", "run"): run_ids,
    ("diff", "a"): run_ids, ("diff", "b"): run_ids,
}


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete exits) when `_ARGCOMPLETE` is set."""
    import argcomplete

    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            for a in sub._actions:
                func = COMPLETERS.get((name, a.dest)) or COMPLETERS.get((None, a.dest))
                if func is not None:
                    a.completer = func
    class Finder(argcomplete.CompletionFinder):
        def collect_completions(self, active_parsers, parsed_args, cword_prefix):
            found = super().collect_completions(active_parsers, parsed_args, cword_prefix)
            # argparse gives `submit`'s `overrides` (nargs='*') an empty list at the recipe already, so
            # argcomplete sees no positional left after `--stage …`: the config keys are offered here.
            if not found and getattr(parsed_args, "command", None) == "submit" and not cword_prefix.startswith("-"):
                found = config_keys(cword_prefix, parsed_args)
            return found

    Finder()(parser, always_complete_options=False)
