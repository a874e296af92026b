"""Sweeps: one stage's config over a grid, every point an ordinary run with its own record.

`jobs submit RECIPE --stage S --sweep KEY=V1,V2 [--sweep KEY2=range(1,4)]` takes Hydra's sweep
grammar (comma lists, `range()`, `choice()`); `parse` reads it and sizes the grid of every
combination from the expressions' arithmetic before a point is listed (at most MaxArraySize points).
The points then go down the one submit path (jobs/submit.py): planned once (jobs/plan.py
`make_sweep_plan`), each point's config checked like a single run's, settled and recorded
(jobs/record.py), and the executor runs them: on Slurm as one job array (`--max-parallel N` ->
`%N`), here one after another (or N at a time).
What stays here is the sweep's own: its grammar, and its views. The sweep's record lives in
lineage/sweeps.py; `status`, `list --sweep`, `compare`, `report` and `cancel` take a sweep ID, and
`--input ROLE=SWEEP:best[METRIC]` feeds the best point's output on, as the records say.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from jobs.errors import InputError, JobsError, RecipeError
from lineage.states import TERMINAL, RunState
from lineage.sweeps import PREFIX, is_sweep

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


def _said(view, point: dict) -> str:
    """A recorded point's values in the order of the sweep's keys (records keep keys sorted)."""
    return said({k: point["values"].get(k) for k in view.keys})


# ---- queries on a sweep ---------------------------------------------------------------------------


def _view(store, text: str):
    from lineage import sweeps as records

    return records.read(store, records.resolve(store, text))


def _metric_of(view, runs, metric: str | None) -> tuple[str, bool]:
    """The metric that ranks the points, and whether higher is better: the one asked for, else the
    stage's loss (`<stage>/loss`), else the first numeric metric the points logged."""
    seen = sorted({k for r in runs if r is not None for k, v in r.metrics.items() if _num(v)})
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


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def ranked(store, text: str, metric: str | None = None):
    """(sweep view, per point its RunView or None, metric, higher_is_better, index of the best point or None)."""
    view = _view(store, text)
    runs = [store.run(r) if r else None for r in view.runs]
    metric, higher = _metric_of(view, runs, metric)
    scored = [(r.metrics[metric], i) for i, r in enumerate(runs)
              if r is not None and r.state == RunState.SUCCEEDED and _num(r.metrics.get(metric))]
    best = (max(scored) if higher else min(scored))[1] if scored else None
    return view, runs, metric, higher, best


def compare(store, ident: str, metric: str | None = None, as_json: bool = False) -> list[str]:
    """`jobs compare SWEEP`: the grid, each point's state and metric, the best marked with *;
    `as_json`: one JSON list of the points."""
    from lineage.records import strict_json

    view, runs, metric, higher, best = ranked(store, ident, metric)
    if as_json:
        return [strict_json([{"point": i, "values": p["values"], "run": r.id if r else None,
                              "state": r.state if r else None, "metric": metric,
                              "value": r.metrics.get(metric) if r else None, "best": i == best}
                             for i, (p, r) in enumerate(zip(view.points, runs))], sort_keys=True)]
    widths = [max(len(k), *(len(str(p["values"].get(k, ""))) for p in view.points)) for k in view.keys]
    head = "  ".join(f"{k:<{w}}" for k, w in zip(view.keys, widths))
    lines = [f"sweep {view.id}: {view.recipe}/{view.stage}, {len(view.points)} points, "
             f"{metric} ({'higher' if higher else 'lower'} is better)",
             f"   POINT  {head}  {'STATE':<10} {metric:>14}  RUN"]
    for i, (p, r) in enumerate(zip(view.points, runs)):
        value = r.metrics.get(metric) if r else None
        shown = f"{value:.6g}" if _num(value) else "-"
        cells = "  ".join(f"{str(p['values'].get(k, '')):<{w}}" for k, w in zip(view.keys, widths))
        lines.append(f"{'*' if i == best else ' '}  {i:>5}  {cells}  {(r.state if r else '-'):<10} {shown:>14}  "
                     f"{r.id if r else '-'}")
    if best is not None:
        lines.append(f"best: point {best} ({_said(view, view.points[best])}), {metric} "
                     f"{runs[best].metrics[metric]:.6g}, run {runs[best].id}")
    return lines


def status(store, ident: str, as_json: bool = False, lines: bool = False) -> list[str]:
    """`jobs status SWEEP`: a count per state, then each point with its run as `jobs status` shows it;
    `as_json`: one JSON list of the points (`lines`: one object per point and line)."""
    from collections import Counter
    from dataclasses import asdict

    from jobs.status import format_rows, rows
    from lineage.records import strict_json

    view = _view(store, ident)
    ids = [r for r in view.runs if r]
    by_run = {row.run: row for row in rows(store, ids)}
    if as_json or lines:
        docs = [strict_json({"point": i, "values": p["values"], **(asdict(by_run[r]) if r else {"run": None})},
                            sort_keys=True) for i, (p, r) in enumerate(zip(view.points, view.runs))]
        return docs if lines else [f"[{', '.join(docs)}]"]
    counts = Counter(by_run[r].state if r else "NOT RECORDED" for r in view.runs)
    lines = [f"sweep {view.id}: {view.recipe}/{view.stage}, {len(view.points)} points: "
             + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    table = format_rows([by_run[r] for r in view.runs if r])
    shown = [_said(view, p) for p in view.points]
    width = max(len("VALUES"), *(len(x) for x in shown))
    lines.append(f"POINT  {'VALUES':<{width}}  {table[0]}")
    at = iter(table[1:])
    for i, r in enumerate(view.runs):
        lines.append(f"{i:>5}  {shown[i]:<{width}}  {next(at) if r else '(not recorded)'}")
    return lines


def run_rows(store, ident: str) -> list:
    """`jobs list --sweep SWEEP`: the index rows of the runs standing for the points, newest first."""
    view = _view(store, ident)
    idx = store.index()
    rows = [idx.run_row(r) for r in dict.fromkeys(r for r in view.runs if r)]
    return sorted((r for r in rows if r is not None), key=lambda r: r["id"], reverse=True)


def sweeps_table(store) -> list[str]:
    """`jobs list --sweep` without an ID: every sweep, newest first."""
    from lineage import sweeps as records

    lines = [f"{'SWEEP':<20}  {'RECIPE':<8} {'STAGE':<9} POINTS  KEYS"]
    for sid in reversed(records.all_ids(store)):
        v = records.read(store, sid)
        lines.append(f"{sid:<20}  {v.recipe:<8} {v.stage:<9} {len(v.points):>6}  {', '.join(v.keys)}")
    return lines


def cancel(store, ident: str) -> list[str]:
    """`jobs cancel SWEEP`: every point not yet ended; a Slurm array is cancelled as a whole."""
    import subprocess

    from jobs.status import cancel as cancel_one, slurm_job

    view = _view(store, ident)
    store.ensure_writable()
    lines, arrays, in_arrays, alone = [], set(), [], []
    for r in view.runs:
        run = store.run(r) if r else None
        if run is None or run.state in TERMINAL:
            continue
        array = next((j.get("array") for j in reversed(run.jobs) if j.get("array")), None)
        if slurm_job(run) and array:
            arrays.add(str(array))
            in_arrays.append((run, array))
        else:
            alone.append(run)
    for array in sorted(arrays):   # a point is recorded CANCELLED only once scancel took its array
        done = subprocess.run(["scancel", array], capture_output=True, text=True)
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        if done.returncode or said:
            raise JobsError(f"sweep {view.id} not cancelled: scancel {array} said "
                            f"{said[-1] if said else f'nothing (exit {done.returncode})'}")
    for run, array in in_arrays:
        store.add_event(run.id, "status", state=RunState.CANCELLED, reason="cancelled by user (its sweep)")
        lines.append(f"{run.id} cancelled (array job {array})")
    for run in alone:
        lines.append(f"{run.id} cancelled ({cancel_one(store, run)})")
    if not lines:
        raise JobsError(f"sweep {view.id}: every point already ended; nothing cancelled")
    return lines + ([f"scancel {' '.join(sorted(arrays))}"] if arrays else [])


def report(store, ident: str, out, metric: str | None = None):
    """`jobs report SWEEP`: one HTML file, the metric against the swept values (one line per value of
    the other keys) and the compare table."""
    import html
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jobs.report import fig_svg, inline_svg, page

    view, runs, metric, higher, best = ranked(store, ident, metric)
    x_key, others = view.keys[0], view.keys[1:]
    series: dict[str, list[tuple]] = {}
    for i, (p, r) in enumerate(zip(view.points, runs)):
        if r is None or not _num(r.metrics.get(metric)):
            continue
        label = said({k: p["values"][k] for k in others}) or metric
        series.setdefault(label, []).append((p["values"][x_key], r.metrics[metric], i == best))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = list(dict.fromkeys(p["values"][x_key] for p in view.points))
    numeric = all(_float(x) is not None for x in xs)
    for label, pts in series.items():
        pos = [_float(x) if numeric else xs.index(x) for x, _, _ in pts]
        ax.plot(pos, [y for _, y, _ in pts], marker="o", label=label)
        for (x, y, is_best), px in zip(pts, pos):
            if is_best:
                ax.plot([px], [y], marker="*", markersize=16, color="black", linestyle="none", label="best")
    if not numeric:
        ax.set_xticks(range(len(xs)), xs)
    elif log_axis(x_key, [_float(x) for x in xs]):
        ax.set_xscale("log")
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    ax.legend(fontsize="small")
    ax.set_title(f"sweep {view.id}: {view.recipe}/{view.stage}")
    fig.tight_layout()
    svg = fig_svg(fig)
    plt.close(fig)
    table = "\n".join(compare(store, view.id, metric))
    body = (f"<h1>sweep {html.escape(view.id)}</h1>\n{inline_svg(svg)}\n<pre>{html.escape(table)}</pre>")
    path = Path(out) if out else Path(f"report-{view.id}.html")
    path.write_text(page(f"sweep {view.id}", body))
    return path


def log_axis(key: str, values: list[float]) -> bool:
    """Whether a sweep plot puts `key` on a log axis: a rate (`sft.lr`, `rl.dpo.lr`, `min_lr`), which
    is swept by factors, whenever its values are positive; any other key spanning 100x or more."""
    if len(values) < 2 or min(values) <= 0:
        return False
    leaf = key.rsplit(".", 1)[-1]
    return leaf == "lr" or leaf.endswith("_lr") or leaf == "learning_rate" or max(values) / min(values) >= 100


def _float(x: str) -> float | None:
    try:
        return float(x)
    except ValueError:
        return None


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


def compare_command(store, ident: str, metric: str | None, as_json: bool) -> int:
    if not is_sweep(ident):
        raise JobsError(f"compare takes a sweep ID ({PREFIX}…), not {ident!r}")
    print("\n".join(compare(store, ident, metric, as_json)))
    return 0
