"""Sweeps: one stage's config over a grid, every point an ordinary run with its own record.

`jobs submit RECIPE --stage S --sweep KEY=V1,V2 [--sweep KEY2=range(1,4)]` takes Hydra's sweep
grammar (comma lists, `range()`, `choice()`); `parse` reads it and sizes the grid of every
combination from the expressions' arithmetic before a point is listed (at most MaxArraySize points).
The points then go down the one submit path (jobs/submit.py): planned once (jobs/plan.py
`make_sweep_plan`), each point's config checked like a single run's, settled and recorded
(jobs/record.py), and the executor runs them: on Slurm as one job array (`--max-parallel N` ->
`%N`), here one after another (or N at a time).
The grammar, the points and the ranking that `--input ROLE=SWEEP:best[METRIC]` reads sit on the
submission path, in jobs/grid.py; what stays here are the sweep's views. The sweep's record lives in
lineage/sweeps.py; `status`, `list --sweep`, `compare`, `report` and `cancel` take a sweep ID.
"""
from __future__ import annotations

from jobs.errors import JobsError
from jobs.grid import numeric, ranked, said, sweep_view
from lineage.states import TERMINAL, RunState
from lineage.sweeps import PREFIX, is_sweep

def _said(view, point: dict) -> str:
    """A recorded point's values in the order of the sweep's keys (records keep keys sorted)."""
    return said({k: point["values"].get(k) for k in view.keys})


# ---- queries on a sweep ---------------------------------------------------------------------------


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
        shown = f"{value:.6g}" if numeric(value) else "-"
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

    view = sweep_view(store, ident)
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
    view = sweep_view(store, ident)
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

    from jobs.cancel import cancel as cancel_one
    from jobs.reconcile import slurm_job

    view = sweep_view(store, ident)
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
        if r is None or not numeric(r.metrics.get(metric)):
            continue
        label = said({k: p["values"][k] for k in others}) or metric
        series.setdefault(label, []).append((p["values"][x_key], r.metrics[metric], i == best))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = list(dict.fromkeys(p["values"][x_key] for p in view.points))
    numeric_x = all(_float(x) is not None for x in xs)
    for label, pts in series.items():
        pos = [_float(x) if numeric_x else xs.index(x) for x, _, _ in pts]
        ax.plot(pos, [y for _, y, _ in pts], marker="o", label=label)
        for (x, y, is_best), px in zip(pts, pos):
            if is_best:
                ax.plot([px], [y], marker="*", markersize=16, color="black", linestyle="none", label="best")
    if not numeric_x:
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


def compare_command(store, ident: str, metric: str | None, as_json: bool) -> int:
    if not is_sweep(ident):
        raise JobsError(f"compare takes a sweep ID ({PREFIX}…), not {ident!r}")
    print("\n".join(compare(store, ident, metric, as_json)))
    return 0
