"""One small schema for config values: stage configs, profiles, recipe.yaml.

Declare what a mapping holds, then collect every problem as a one-line string (never raise):

    from stages.schema import Bool, Float, Int, List, Map, Str, check

    DATA = Map({
        "seed": Int(0, 2**32 - 1),
        "n_sft": Int(1, 10_000_000),                 # bounds are inclusive
        "lr": Float(0, 1, open_lo=True),             # 0 < lr <= 1
        "backend": Str(choices=("hf", "vllm")),
        "name": Str(pattern=r"[A-Za-z0-9_.-]+"),     # full match; control characters are always refused
        "note": Str(required=False, null=True),      # may be absent, may be null
        "stop": List(Str(), max_len=16),
        "opts": Map({}, extra=True),                 # any keys
    })
    problems = check(config["data"], DATA, "data")   # ["data.n_sft must be an integer ... (got 'abc')", ...]

What it refuses: a missing required key, an unknown key (unless `extra=True`), a bool where a
number is wanted (`True` is an int in Python), a string where a number is wanted ('10**12'), a
float where an int is wanted (1e3), NaN and infinities, values outside [lo, hi] (so 1e30 and 10**12
fail wherever a range is given), strings with control characters (newlines would reach scripts).
`Int`/`Float` without bounds still refuse NaN/inf. `Any()` accepts anything (documents a key).
A field's `check=` callable gets the value (after the type check passes) and returns a problem
string or None: for rules a type cannot express (e.g. "a power of two").
Messages quote the bad value with repr(), cut to 60 characters, so each stays one line.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any as _Any, Callable

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bounds(lo, hi, open_lo: bool, open_hi: bool) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" {'>' if open_lo else '>='} {lo}"
    if lo is None:
        return f" {'<' if open_hi else '<='} {hi}"
    return f" in {'(' if open_lo else '['}{lo}, {hi}{')' if open_hi else ']'}"


@dataclass(frozen=True)
class Field:
    """Base of every field: `required` (the key must be present), `null` (None is allowed)."""
    required: bool = field(default=True, kw_only=True)
    null: bool = field(default=False, kw_only=True)
    check: Callable[[_Any], str | None] | None = field(default=None, kw_only=True)

    def problems(self, value, where: str) -> list[str]:
        if value is None:
            return [] if self.null else [f"{where} must not be null"]
        found = self._problems(value, where)
        if not found and self.check is not None:
            extra = self.check(value)
            found = [f"{where} {extra}"] if extra else []
        return found

    def _problems(self, value, where: str) -> list[str]:
        return []


@dataclass(frozen=True)
class Any(Field):
    """Any value (the key is documented and allowed, its value is the stage's business)."""


@dataclass(frozen=True)
class Int(Field):
    lo: int | None = None
    hi: int | None = None

    def _problems(self, value, where):
        want = f"an integer{_bounds(self.lo, self.hi, False, False)}"
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{where} must be {want} (got {_show(value)})"]
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return [f"{where} must be {want} (got {_show(value)})"]
        return []


@dataclass(frozen=True)
class Float(Field):
    """A real number; ints are accepted (lr: 1). `open_lo`/`open_hi` exclude the bound itself."""
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False

    def _problems(self, value, where):
        want = f"a number{_bounds(self.lo, self.hi, self.open_lo, self.open_hi)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [f"{where} must be {want} (got {_show(value)})"]
        if isinstance(value, float) and not math.isfinite(value):
            return [f"{where} must be {want}, finite (got {_show(value)})"]
        low = self.lo is not None and (value <= self.lo if self.open_lo else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.open_hi else value > self.hi)
        return [f"{where} must be {want} (got {_show(value)})"] if low or high else []


@dataclass(frozen=True)
class Bool(Field):
    def _problems(self, value, where):
        return [] if isinstance(value, bool) else [f"{where} must be true or false (got {_show(value)})"]


@dataclass(frozen=True)
class Str(Field):
    """A string: one of `choices`, or a full match of `pattern`; `empty=False` refuses ''."""
    choices: tuple | None = None
    pattern: str | None = None
    empty: bool = True

    def _problems(self, value, where):
        if self.choices is not None:
            if isinstance(value, str) and value in self.choices:
                return []
            return [f"{where} must be one of {', '.join(map(str, self.choices))} (got {_show(value)})"]
        if not isinstance(value, str):
            return [f"{where} must be a string (got {_show(value)})"]
        if _CONTROL.search(value):
            return [f"{where} must not contain control characters such as newlines (got {_show(value)})"]
        if not self.empty and not value:
            return [f"{where} must not be empty"]
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return [f"{where} must match {self.pattern} (got {_show(value)})"]
        return []


@dataclass(frozen=True)
class List(Field):
    item: Field | None = None
    min_len: int = 0
    max_len: int | None = None

    def _problems(self, value, where):
        if not isinstance(value, (list, tuple)):
            return [f"{where} must be a list (got {_show(value)})"]
        if len(value) < self.min_len or (self.max_len is not None and len(value) > self.max_len):
            return [f"{where} must hold {self.min_len} to {self.max_len if self.max_len is not None else 'any number of'} items (got {len(value)})"]
        if self.item is None:
            return []
        return [p for i, v in enumerate(value) for p in self.item.problems(v, f"{where}[{i}]")]


@dataclass(frozen=True)
class Map(Field):
    """A mapping with declared `keys` (name -> Field); `extra=True` allows undeclared keys."""
    keys: dict = field(default_factory=dict)
    extra: bool = False

    def _problems(self, value, where):
        if not isinstance(value, dict):
            return [f"{where} must be a mapping (got {_show(value)})"]
        out = []
        for name, spec in self.keys.items():
            path = f"{where}.{name}" if where else str(name)
            if name not in value:
                if spec.required:
                    out.append(f"{path} is missing")
                continue
            out.extend(spec.problems(value[name], path))
        if not self.extra:
            unknown = sorted(str(k) for k in value if k not in self.keys)
            if unknown:
                known = ", ".join(map(str, self.keys)) or "none"
                out.append(f"{where or 'config'} has unknown key{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(unknown)} (known: {known})")
        return out


def check(value, schema: Field | dict, where: str = "") -> list[str]:
    """Every problem of `value` against `schema` (a Field, or a dict taken as Map(dict)), one line each."""
    if isinstance(schema, dict):
        schema = Map(schema)
    return schema.problems(value, where)
