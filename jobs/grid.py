"""A sweep's grid, on the submission path: Hydra's sweep grammar parsed and sized, its points, and
the best point of a recorded sweep, read from the records alone (`SWEEP:best[METRIC]` as an input).

jobs/sweep.py, above, keeps the sweep's views (status, compare, report, cancel); planning and
submitting need only this.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from jobs.errors import InputError, JobsError, RecipeError
from lineage.states import TERMINAL, RunState
from lineage.sweeps import PREFIX

# Metric names where more is better; any other (a loss) ranks lowest first.
HIGHER = re.compile(r"acc|exact|match|pass@|reward|score|f1|win", re.I)

# A sweep is sized before a single point is listed: at most this many points, Slurm's own default
# MaxArraySize (an array's task IDs are 0..MaxArraySize-1), or the cluster's MaxArraySize on Slurm.
DEFAULT_MAX_POINTS = 1001


@dataclass(frozen=True)
class Axis:
    key: str             # as the override spells it (with a leading + or ++ when it adds a key)
    values: list[str]


def max_points(executor: str) -> tuple[int, str]:
    """The most points a sweep may have, and where that number comes from."""
    if executor == "slurm":
        import subprocess

        try:
            out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        m = re.search(r"^MaxArraySize\s*=\s*(\d+)\s*$", out, re.M)
        if m and int(m[1]) > 0:
            return int(m[1]), "the cluster's MaxArraySize"
    return DEFAULT_MAX_POINTS, "Slurm's default MaxArraySize"


def parse(specs: list[str], limit: tuple[int, str] = (DEFAULT_MAX_POINTS, "Slurm's default MaxArraySize"),
          ) -> list[Axis]:
    """--sweep KEY=V1,V2 | KEY=range(a,b[,step]) | KEY=choice(a,b): Hydra's discrete sweeps.

    The one reading of a sweep expression: Hydra's parser gives the expression's tree, each axis is
    sized from its arithmetic (a range's length) and the grid from their product, all before a value
    is listed, so a grid of 10^12 points is refused as fast as one of ten."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    cap, whence = limit
    axes: list[Axis] = []
    for text in specs:
        try:
            ov = OverridesParser.create().parse_overrides([text])[0]
        except HydraException as e:
            raise RecipeError(f"bad --sweep {_shown(text)}: {_one_line(e)}") from None
        except RecursionError:
            raise RecipeError(f"bad --sweep {_shown(text)}: nested too deeply to parse") from None
        if ov.is_delete():
            raise RecipeError(f"bad --sweep {_shown(text)}: a sweep sets values; ~KEY deletes one")
        key = ov.get_key_element()
        if any(a.key.lstrip("+") == key.lstrip("+") for a in axes):
            raise RecipeError(f"--sweep {ov.key_or_group} is given twice: put every value in one --sweep")
        values = _values(ov, text, cap, whence) if ov.is_sweep_override() else [ov.get_value_element_as_str()]
        if len(set(values)) != len(values):
            raise RecipeError(f"bad --sweep {_shown(text)}: a value is repeated")
        axes.append(Axis(key, values))
    size = math.prod(len(a.values) for a in axes)
    if size > cap:
        raise RecipeError(f"--sweep: a grid of {' x '.join(str(len(a.values)) for a in axes)} = {_count(size)} points; "
                          f"a sweep has at most {cap} ({whence}): split it into smaller sweeps")
    return axes


def _values(ov, text: str, cap: int, whence: str) -> list[str]:
    """A sweep override's values, each axis sized before it is listed."""
    from hydra.core.override_parser.types import ChoiceSweep, Glob, IntervalSweep, RangeSweep, Sweep

    def bad(why: str) -> RecipeError:
        return RecipeError(f"bad --sweep {_shown(text)}: {why}")

    v = ov.value()
    if isinstance(v, IntervalSweep):
        raise bad("interval() has no points to run; give values, range() or choice()")
    if isinstance(v, Glob):
        raise bad("glob() picks config groups, not values; give values, range() or choice()")
    if getattr(v, "shuffle", False):   # a new order each time would be a new sweep (its ID) each time
        raise bad("shuffle() gives a new order, and so a new sweep, on every call; give the values in the order to run")
    if isinstance(v, RangeSweep):
        start, stop, step = v.start, v.stop, v.step
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (start, stop, step)):
            raise bad("range() takes finite numbers")
        if step == 0:
            raise bad("range() step is 0")
        # ceil((stop - start) / step), exact for integers of any size
        n = max(0, -((start - stop) // step) if all(isinstance(x, int) for x in (start, stop, step))
                else math.ceil((stop - start) / step))
        if n == 0:
            raise bad(f"range({start},{stop},{step}) has no values (stop must lie past start in the step's direction)")
    elif isinstance(v, (ChoiceSweep, list)):
        items = v.list if isinstance(v, ChoiceSweep) else v
        if any(isinstance(x, Sweep) for x in items):
            raise bad("a sweep inside a sweep (choice() or range() among the values); give one list of values, "
                      "or one range()")
        n = len(items)
    else:
        raise bad("give values, range() or choice()")
    if n > cap:
        raise bad(f"{_count(n)} values; a sweep has at most {cap} points ({whence})")
    return list(itertools.islice(ov.sweep_string_iterator(), cap + 1))


def _count(n: int | float) -> str:
    return str(n) if n < 10**15 else f"{float(n):.3g}"


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) < 300 else text[:297] + "..."


def grid(axes: list[Axis]) -> list[dict[str, str]]:
    """Every combination, the last axis varying fastest: [{key: value}, …]."""
    return [dict(zip([a.key for a in axes], combo)) for combo in itertools.product(*[a.values for a in axes])]


def said(point: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


# ---- ranking a recorded sweep's points --------------------------------------------------------


def sweep_view(store, text: str):
    from lineage import sweeps as records

    return records.read(store, records.resolve(store, text))


def _metric_of(view, runs, metric: str | None) -> tuple[str, bool]:
    """The metric that ranks the points, and whether higher is better: the one asked for, else the
    stage's loss (`<stage>/loss`), else the first numeric metric the points logged."""
    seen = sorted({k for r in runs if r is not None for k, v in r.metrics.items() if numeric(v)})
    if metric is None:
        for want in (f"{view.stage}/loss",):
            if want in seen:
                metric = want
        metric = metric or next((k for k in seen if k.endswith("/loss")), None) or (seen[0] if seen else None)
        if metric is None:
            raise JobsError(f"sweep {view.id}: no point has recorded a metric yet")
    elif seen and metric not in seen:
        raise JobsError(f"sweep {view.id}: no point recorded metric {metric!r} (metrics: {', '.join(seen)})")
    return metric, bool(HIGHER.search(metric))


def numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def ranked(store, text: str, metric: str | None = None):
    """(sweep view, per point its RunView or None, metric, higher_is_better, index of the best point or None)."""
    view = sweep_view(store, text)
    runs = [store.run(r) if r else None for r in view.runs]
    metric, higher = _metric_of(view, runs, metric)
    scored = [(r.metrics[metric], i) for i, r in enumerate(runs)
              if r is not None and r.state == RunState.SUCCEEDED and numeric(r.metrics.get(metric))]
    best = (max(scored) if higher else min(scored))[1] if scored else None
    return view, runs, metric, higher, best


# ---- a later stage takes the best point's output -------------------------------------------------
BEST = re.compile(rf"^({PREFIX}[0-9a-f]{{1,16}}):best(?:\[([^\]]+)\])?$")


def best_input(store, text: str, kind: str) -> str:
    """`SWEEP:best` or `SWEEP:best[METRIC]` -> the artifact of `kind` the best point's run made.

    Planning reads only: the points' states are their records', never asked of Slurm (`jobs status
    SWEEP` asks, and records an end only Slurm saw)."""
    m = BEST.match(text)
    if not m:
        raise InputError(f"bad input {text!r}: a sweep is given as SWEEP:best or SWEEP:best[METRIC]")
    from lineage import sweeps as records

    view = records.read(store, records.resolve(store, m[1]))
    busy = [r for r in view.runs if r and store.run(r).state not in TERMINAL]
    if busy:   # the best so far is not the sweep's best
        raise InputError(f"sweep {view.id}: {len(busy)} point(s) not ended yet, as recorded; wait for them "
                         f"(`jobs status {view.id}` asks Slurm and records what ended)")
    view, runs, metric, higher, best = ranked(store, view.id, m[2])
    if best is None:
        raise InputError(f"sweep {view.id}: no point has succeeded with metric {metric}; no best point yet")
    outs = {name: art for name, art in runs[best].outputs.items() if store.artifact(art).get("kind") == kind}
    if len(outs) != 1:
        raise InputError(f"sweep {view.id}: the best point's run {runs[best].id} has "
                         f"{'no' if not outs else 'several'} {kind} output(s)")
    return next(iter(outs.values()))
