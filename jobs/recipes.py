"""Recipes: `recipes/<name>/recipe.yaml` (the stage graph) and one Hydra config per stage.

Composition happens once, here, in the launcher: YAML -> overrides (Hydra's grammar) ->
interpolation -> a plain dict that goes into the run record unchanged.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from jobs.errors import RecipeError

BUILTIN = Path(__file__).resolve().parent.parent / "recipes"


def recipe_dirs() -> list[Path]:
    """$JOBS_RECIPES (folders separated by ':') first, then the project's own recipes/."""
    extra = [Path(p) for p in os.environ.get("JOBS_RECIPES", "").split(os.pathsep) if p]
    return [*extra, BUILTIN]


@dataclass(frozen=True)
class RecipeInput:
    role: str
    stage: str      # upstream stage in the same recipe
    output: str     # that stage's output name
    kind: str       # the artifact kind this role accepts


@dataclass(frozen=True)
class RecipeStage:
    name: str
    module: str
    inputs: tuple[RecipeInput, ...]
    outputs: dict[str, str]            # output name -> artifact kind
    resources: dict = field(default_factory=dict)
    container: str | None = None
    ray: bool = False


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    path: Path
    stages: dict[str, RecipeStage]       # in dependency order

    def stage(self, name: str) -> RecipeStage:
        if name not in self.stages:
            raise RecipeError(f"recipe {self.name} has no stage {name!r} (stages: {', '.join(self.stages)})")
        return self.stages[name]

    def select(self, text: str) -> list[RecipeStage]:
        """'all', one stage, or a comma list; always returned in dependency order."""
        if text == "all":
            return list(self.stages.values())
        wanted = [s.strip() for s in text.split(",") if s.strip()]
        for name in wanted:
            self.stage(name)
        return [s for s in self.stages.values() if s.name in wanted]


def available() -> list[str]:
    return sorted({p.parent.name for d in recipe_dirs() for p in d.glob("*/recipe.yaml")})


def describe() -> str:
    """`jobs recipes`: every recipe, its stages, what each reads and writes."""
    lines = []
    for name in available():
        r = load(name)
        lines.append(f"{name:<8} {r.description}")
        for s in r.stages.values():
            ins = ", ".join(f"{i.role}<-{i.stage}.{i.output}" for i in s.inputs) or "-"
            outs = ", ".join(f"{k}:{v}" for k, v in s.outputs.items())
            lines.append(f"  {s.name:<9} in: {ins}\n  {'':<9} out: {outs}")
    return "\n".join(lines)


def load(name: str) -> Recipe:
    path = next((d / name / "recipe.yaml" for d in recipe_dirs() if (d / name / "recipe.yaml").is_file()), None)
    if path is None or "/" in name:
        raise RecipeError(f"unknown recipe {name!r} (recipes: {', '.join(available()) or 'none'})")
    raw = yaml.safe_load(path.read_text()) or {}
    default_container = raw.get("container")
    stages: dict[str, RecipeStage] = {}
    for sname, s in (raw.get("stages") or {}).items():
        inputs = []
        for role, source in (s.get("inputs") or {}).items():
            up_stage, _, up_output = str(source).partition(".")
            if up_stage not in stages or up_output not in stages[up_stage].outputs:
                raise RecipeError(f"{path}: stage {sname} input {role}: {source!r} is not an output of an earlier stage")
            inputs.append(RecipeInput(role, up_stage, up_output, stages[up_stage].outputs[up_output]))
        stages[sname] = RecipeStage(
            name=sname,
            module=s["module"],
            inputs=tuple(inputs),
            outputs=dict(s.get("outputs") or {}),
            resources=dict(s.get("resources") or {}),
            container=s.get("container", default_container),
            ray=bool(s.get("ray", False)),
        )
    return Recipe(name=raw.get("name", name), description=raw.get("description", ""), path=path.parent, stages=stages)


#: How deep a value may nest ({…} and […] in an override, mappings and lists in a config): far
#: beyond any real config, far below Python's recursion limit that Hydra's parser and JSON hit.
MAX_NESTING = 64


def _nesting(text: str) -> int:
    """The deepest bracket nesting in an override's text (quotes are not parsed: an upper bound)."""
    depth = deepest = 0
    for c in text:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
    return deepest


def check_values(config, where: str) -> None:
    """What a record can hold: strict JSON (no NaN or Infinity, which strict parsers refuse), keys that
    are strings, and no deeper nesting than MAX_NESTING."""
    import math

    stack = [(config, "", 1)]
    while stack:
        value, key, depth = stack.pop()
        if depth > MAX_NESTING:
            raise RecipeError(f"{where}: {key or 'the config'} is nested more than {MAX_NESTING} levels deep")
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise RecipeError(f"{where}: key {k!r} under {key or 'the top'} is not a string")
                stack.append((v, f"{key}.{k}" if key else k, depth + 1))
        elif isinstance(value, list):
            stack += [(v, f"{key}[{i}]", depth + 1) for i, v in enumerate(value)]
        elif isinstance(value, float) and not math.isfinite(value):
            raise RecipeError(f"{where}: {key} is {value}: records are strict JSON, which has no NaN or "
                              "Infinity; give a finite number (or null)")


def for_other_stages(overrides: list[str], recipe: Recipe, selected: list[str]) -> list[str]:
    """The overrides whose key names a stage of the recipe that is not selected (`sft.lr=1e-4` with
    `--stage data`): they belong to that stage only, so this submission leaves them out."""
    others = set(recipe.stages) - set(selected)
    heads = [re.match(r"^(?:\+\+|\+|~)?([^.=@~+]*)", text)[1] for text in overrides]
    return [text for text, head in zip(overrides, heads) if head in others]


def split_overrides(overrides: list[str], stages: list[str]) -> dict[str, list[str]]:
    """Parse overrides with Hydra's grammar and route each to the stages it names.

    `sft.lr=1e-4` goes to the sft stage only; a key that names no stage (`seed=3`) goes to all.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for text in overrides:
        depth = _nesting(text)
        if depth > MAX_NESTING:
            raise RecipeError(f"override {_one_line(text[:60])}...: nested {depth} levels deep, more than the "
                              f"{MAX_NESTING} a config may have")
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise RecipeError(f"malformed override: {_one_line(e)}") from None
    except RecursionError:
        raise RecipeError(f"malformed override: nested too deeply to parse (at most {MAX_NESTING} levels)") from None
    routed: dict[str, list[str]] = {s: [] for s in stages}
    for text, ov in zip(overrides, parsed):
        head = ov.key_or_group.split(".")[0]
        for s in ([head] if head in routed else stages):
            routed[s].append(text)
    return routed


def compose(recipe: Recipe, stage: str, overrides: list[str]) -> dict:
    """The stage's resolved config: `<stage>.yaml` + its defaults + overrides, interpolated."""
    return compose_points(recipe, stage, overrides, [[]])[0]


def compose_points(recipe: Recipe, stage: str, overrides: list[str], points: list[list[str]]) -> list[dict]:
    """The stage's resolved config for each point's own overrides on top of `overrides`."""
    one = composer(recipe, stage, overrides)
    return [one(point) for point in points]


def composer(recipe: Recipe, stage: str, overrides: list[str]):
    """point's overrides -> the stage's resolved config. The stage is composed once with `overrides`;
    each point's overrides are applied to a copy of that composed, not yet interpolated, config, as
    Hydra applies overrides to the config it composed, and only then interpolated: a sweep of many
    points pays for one composition. A point that picks a config group (a defaults entry) is composed
    on its own."""
    import copy

    groups = {p.name for p in recipe.path.iterdir() if p.is_dir()} if recipe.path.is_dir() else set()
    base = []

    def one(point: list[str]) -> dict:
        every = [*overrides, *point]
        ovs = _guarded(recipe, stage, every, lambda: _parse(point))
        if any(ov.key_or_group.split(".")[0] in groups for ov in ovs):
            return _guarded(recipe, stage, every, lambda: _resolved(_composed(recipe, stage, every)))
        if not base:
            base.append(_guarded(recipe, stage, overrides, lambda: _composed(recipe, stage, overrides)))

        def applied():
            cfg = copy.deepcopy(base[0])   # Hydra's composed config is in struct mode: a typo'd key is refused
            for ov in ovs:
                _apply(cfg, ov)
            return _resolved(cfg)

        return _guarded(recipe, stage, every, applied)

    return one


def _parse(overrides: list[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides) if overrides else []


def _composed(recipe: Recipe, stage: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    if not (recipe.path / f"{stage}.yaml").is_file():
        raise RecipeError(f"recipe {recipe.name} has no config {stage}.yaml in {recipe.path}")
    with initialize_config_dir(config_dir=str(recipe.path), version_base="1.3"):
        return hydra_compose(config_name=stage, overrides=overrides)


def _apply(cfg, ov) -> None:
    """One parsed override on a composed config, with Hydra's meaning: `~key` deletes, `+key=v` adds a
    key that must not exist, `++key=v` sets whether or not it exists, `key=v` changes one that exists."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    key, value = ov.key_or_group, ov.value()
    if ov.is_delete():
        now = OmegaConf.select(cfg, key, throw_on_missing=False)
        if now is None:
            raise _Refused(f"Could not delete from config. '{key}' does not exist.")
        if value is not None and value != now:
            raise _Refused(f"Could not delete from config. The value of '{key}' is {now} and not {value}.")
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        with open_dict(cfg):
            del node[leaf]
    elif ov.is_add():
        if OmegaConf.select(cfg, key, throw_on_missing=False) is not None:
            raise _Refused(f"Could not append to config. An item is already at '{key}'.")
        with open_dict(cfg):
            OmegaConf.update(cfg, key, value, merge=True)
    elif ov.is_force_add():
        with open_dict(cfg):
            OmegaConf.update(cfg, key, value, merge=True)
    else:
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except (ConfigAttributeError, ConfigKeyError):
            raise _Refused(f"Could not override '{key}'.") from None


class _Refused(Exception):
    """Hydra's words for an override its composed config refuses; `_guarded` says it as a RecipeError."""


def _resolved(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def _guarded(recipe: Recipe, stage: str, overrides: list[str], make):
    """`make()` with every Hydra and OmegaConf error said in one line (an unknown key: the nearest
    known ones); a resolved config is checked for what a record can hold."""
    try:
        value = make()
    except RecipeError:
        raise
    except RecursionError:
        raise RecipeError(f"{recipe.name}/{stage}: the config is nested too deeply "
                          f"(at most {MAX_NESTING} levels)") from None
    except Exception as e:  # Hydra and OmegaConf raise many types; all mean "this config is wrong"
        unknown = re.search(r"Could not override '([^']+)'|Could not delete from config\. '([^']+)' does not exist", str(e))
        if unknown and overrides:
            raise RecipeError(unknown_key(recipe, stage, unknown[1] or unknown[2])) from None
        raise RecipeError(f"{recipe.name}/{stage}: {_one_line(e)}") from None
    if isinstance(value, dict):
        check_values(value, f"{recipe.name}/{stage}")
    return value


def _keys(config: dict, head: str = "") -> list[str]:
    """Every key of a composed config, sections and values, dotted (`data`, `data.n_sft`, ...)."""
    out = []
    for k, v in config.items():
        key = f"{head}.{k}" if head else str(k)
        out += [key, *(_keys(v, key) if isinstance(v, dict) else [])]
    return out


def unknown_key(recipe: Recipe, stage: str, key: str) -> str:
    """Our message for an override of a key the stage's config lacks: the closest keys it has (Hydra's
    own advice, to add the key with `+`, only moves the error into the stage's check)."""
    import difflib

    keys = _keys(compose(recipe, stage, []))
    parent = key.rpartition(".")[0]
    if parent in keys and parent not in [k.rpartition(".")[0] for k in keys]:
        return f"{recipe.name}/{stage}: {parent} is a value, not a section: {key} cannot be set"
    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else "its keys start with " + ", ".join(sorted({k.split('.')[0] for k in keys}))
    return f"{recipe.name}/{stage}: unknown config key {key} ({hint})"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) < 300 else text[:297] + "..."
