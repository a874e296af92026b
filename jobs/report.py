"""`jobs report RUN|ARTIFACT|RECIPE`: one HTML file that needs no network to view.

It holds the lineage graph as a picture (inputs -> runs -> outputs), the runs' timeline (each attempt's
queue wait, boot and phases on one axis: jobs/timeline.py), each run's metric curves from
its metrics.jsonl, the eval table (results.json of eval-report artifacts), and each run's config,
environment, container and attempts. Plots are matplotlib SVG inlined in the page; the graph is
Graphviz's `dot` SVG when `dot` is on PATH, else drawn with matplotlib. The page has no script, and
its Content-Security-Policy forbids loading anything, so it opens the same from a file:// path,
an e-mail attachment or a laptop on a plane.

Scope: a RUN shows that run, with its inputs' ancestry and its outputs' descendants in the graph;
an ARTIFACT (art_…, NAME:latest) shows every run upstream and downstream of it; a RECIPE one consistent
chain of its successful runs (jobs/chains.py recipe_chain), named on the page.
"""
from __future__ import annotations

import html
import io
import json
import math
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

from jobs.errors import JobsError
from lineage.errors import LineageError
from lineage.layout import RunDir

RUN_FILL, ART_FILL, TARGET_EDGE = "#d6e6f5", "#fbe3c4", "#c0392b"
MAX_POINTS = 4000          # per curve: a longer series is thinned so the SVG stays small
PAGE_PT = 860              # the page's content width (1148 px) in points
PENDING = "(when it starts)"   # the label of an input edge from a run that has not produced it yet
MAX_READ = 64 << 20        # bytes read from one metrics.jsonl or results.json


# ---- what the report covers -----------------------------------------------------------------
def _scope(store, idx, target: str) -> tuple[str, list[str], list[str], str | None]:
    """(title, runs shown in full, seed artifacts of the graph, highlighted node). A graph grows
    downstream from the seed artifacts; a single run's outputs are its seeds."""
    if target.startswith("art_") or ":" in target:
        art = store.resolve_artifact(target)
        return f"artifact {_art_label(idx, art)}", [], [art], art
    rows = idx.runs(recipe=target) if re.fullmatch(r"[A-Za-z0-9_.-]+", target) else []
    if rows:
        from jobs.chains import recipe_chain
        chain, _ = recipe_chain(store, idx, target)   # one consistent chain of successful runs
        if not chain:
            raise JobsError(f"recipe {target} has no successful run in {store.root} (see `jobs list --recipe {target}`)")
        return f"recipe {target}", sorted(chain.values()), [], None
    if not re.fullmatch(r"[0-9a-fA-F-]+", target):
        from jobs import recipes
        known = target in recipes.available()
        raise JobsError(f"no runs of recipe {target!r} in {store.root} (submit one first)" if known else
                        f"{target!r} is not a run ID, an artifact (art_…, NAME:latest) or a recipe with runs "
                        f"in {store.root} (see `jobs list`, `jobs artifacts`)")
    run = idx.resolve_run(target)
    return f"run {run}", [run], [e["artifact"] for e in idx.edges_of(run, "out")], run


def _walk(store, idx, runs: list[str], arts: list[str]) -> tuple[dict[str, str], set[tuple[str, str, str]]]:
    """Nodes (id -> "run"|"art") and edges (src, dst, role): the runs' inputs and outputs, everything
    upstream of them and of the seed artifacts, and everything downstream of the seeds."""
    from lineage.graph import walk

    nodes: dict[str, str] = {}
    edges: set[tuple[str, str, str]] = set()
    for r in runs:
        view = store.run(r)
        for role, ref in sorted((view.spec.pending_inputs or {}).items()):
            if role not in view.inputs and isinstance(ref, dict) and ref.get("run"):
                nodes.setdefault(ref["run"], "run")     # not started yet: an edge from the run that will produce it
                edges.add((ref["run"], r, f"{role} {PENDING}"))
    walked, more = walk(idx, arts, runs, one_producer=True)
    nodes.update(walked)
    return nodes, edges | more


def _art_label(idx, art: str) -> str:
    from jobs.chains import describe
    return describe(idx, art)   # its own version, not a newer one a re-run of the same bytes added


def _run_label(idx, run: str) -> str:
    row = idx.run_row(run)
    return f"{row['recipe']}/{row['stage']}" if row else run[:13]


# ---- the lineage graph ----------------------------------------------------------------------
def problems(store, arts) -> dict[str, str | None]:
    """art -> why it does not verify (None: it does), as `jobs show` checks it: a report never shows
    an artifact's name or numbers without saying its files changed."""
    found: dict[str, str | None] = {}
    for a in sorted(set(arts)):
        try:
            store.verify(a)
            found[a] = None
        except LineageError as e:   # changed files, or a record the report cannot read
            found[a] = " ".join(str(e).split())
    return found


def _mark(problem: str | None) -> str:
    return "ok" if problem is None else f"CORRUPT {problem}"


def _graph_svg(store, idx, nodes: dict[str, str], edges: set, target: str | None, dot: str | None,
               bad: dict[str, str | None] | None = None) -> str:
    labels = {}
    for n, what in nodes.items():
        if what == "run":
            row = idx.run_row(n)
            labels[n] = f"{_run_label(idx, n)}\n{n[:13]}\n{row['state'] if row and row['state'] else '?'}"
        else:
            try:
                kind = store.artifact(n)["kind"]
            except LineageError:  # a record the report cannot read is still a node
                kind = "?"
            labels[n] = f"{_art_label(idx, n)}\n{kind}  {n[:12]}" + ("\nCORRUPT" if (bad or {}).get(n) else "")
    if not dot:
        return _mpl_graph_svg(nodes, edges, labels, target)
    svg = _dot_svg(dot, nodes, edges, labels, target, "LR")
    width = re.search(r'<svg[^>]*\swidth="([0-9.]+)pt"', svg)
    if width and float(width.group(1)) > PAGE_PT * 1.5:   # a long chain would shrink to unreadable: top-down
        svg = _dot_svg(dot, nodes, edges, labels, target, "TB")
    return svg


def _dot_svg(dot: str, nodes, edges, labels, target, rankdir: str) -> str:
    ids = {n: f"n{i}" for i, n in enumerate(sorted(nodes))}
    q = lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'  # noqa: E731
    lines = ["digraph lineage {", f"  rankdir={rankdir}; bgcolor=transparent; nodesep=0.25; ranksep=0.45;",
             '  node [fontname="Helvetica", fontsize=10, style=filled, penwidth=1];',
             '  edge [fontname="Helvetica", fontsize=9, color="#555555", fontcolor="#555555"];']
    for n in sorted(nodes):
        shape, fill = ("box", RUN_FILL) if nodes[n] == "run" else ("note", ART_FILL)
        extra = f', penwidth=2.5, color="{TARGET_EDGE}"' if n == target else ""
        lines.append(f"  {ids[n]} [label={q(labels[n])}, shape={shape}, fillcolor=\"{fill}\"{extra}];")
    lines += [f"  {ids[a]} -> {ids[b]} [label={q(role)}" + (", style=dashed" if role.endswith(PENDING) else "") + "];"
              for a, b, role in sorted(edges)]
    lines.append("}")
    p = subprocess.run([dot, "-Tsvg"], input="\n".join(lines), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise JobsError(f"graphviz dot failed on the lineage graph: {p.stderr.strip()[:300]}")
    return p.stdout


def _layers(nodes, edges) -> dict[str, int]:
    """Longest-path depth from the graph's sources: inputs left of their runs, runs left of outputs."""
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b, _ in edges:
        parents[b].append(a)
    depth: dict[str, int] = {}

    def d(n: str, stack: frozenset = frozenset()) -> int:
        if n not in depth:
            depth[n] = 0 if n in stack else 1 + max((d(p, stack | {n}) for p in parents[n]), default=-1)
        return depth[n]
    for n in nodes:
        d(n)
    return depth


def _mpl_graph_svg(nodes, edges, labels, target) -> str:
    """The graph without Graphviz: ranks by depth (left to right, or top-down for a long chain),
    each rank ordered by its parents' places; arrows are clipped at the boxes by matplotlib."""
    from matplotlib.figure import Figure

    depth = _layers(nodes, edges)
    ranks: dict[int, list[str]] = {}
    for n in sorted(nodes, key=lambda n: (depth[n], n)):
        ranks.setdefault(depth[n], []).append(n)
    place: dict[str, float] = {}
    for r in sorted(ranks):
        def key(n: str) -> float:
            ps = [place[a] for a, b, _ in edges if b == n and a in place]
            return sum(ps) / len(ps) if ps else 0.0
        members = sorted(ranks[r], key=key)
        for i, n in enumerate(members):
            place[n] = i - (len(members) - 1) / 2
    down = len(ranks) > 6
    pos = {n: (place[n], -depth[n]) if down else (depth[n], -place[n]) for n in nodes}
    across, along = max(len(m) for m in ranks.values()), len(ranks)
    cols, rows = (across, along) if down else (along, across)
    fig = Figure(figsize=(max(4.0, 1.9 * cols), max(1.4, 0.8 * rows)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.55, max(xs) + 0.55)
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.5)
    boxes = {}
    for n, (x, y) in pos.items():
        run = nodes[n] == "run"
        boxes[n] = ax.text(x, y, labels[n], ha="center", va="center", fontsize=6.5, zorder=2, parse_math=False, bbox={
            "boxstyle": "square,pad=0.4" if run else "round,pad=0.4", "fc": RUN_FILL if run else ART_FILL,
            "ec": TARGET_EDGE if n == target else "#333333", "lw": 2.0 if n == target else 0.7})
    for a, b, role in sorted(edges):
        # Drawn after the boxes (higher zorder), so the patches they are clipped at are already placed.
        ax.annotate("", xy=pos[b], xytext=pos[a], zorder=3, arrowprops={
            "arrowstyle": "->", "color": "#555555", "lw": 0.8, "shrinkA": 1, "shrinkB": 1,
            "patchA": boxes[a].get_bbox_patch(), "patchB": boxes[b].get_bbox_patch(),
            "linestyle": "--" if role.endswith(PENDING) else "-"})
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, role, fontsize=5.5, color="#555555", ha="center", va="center",
                zorder=4, parse_math=False, bbox={"fc": "white", "ec": "none", "pad": 0.5})
    return fig_svg(fig)


# ---- metric curves ---------------------------------------------------------------------------
def _read_small(path: Path) -> str | None:
    """A regular file's text, or None: a planted FIFO or device is never opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(MAX_READ).decode("utf-8", "replace")


def read_series(path: Path) -> dict[str, list[tuple[float, float]]]:
    """metrics.jsonl -> {key: [(step, value), …]} sorted by step; a step logged again (a resumed
    attempt) keeps its last value. Torn or non-numeric lines are skipped."""
    text = _read_small(path)
    found: dict[str, dict[float, float]] = {}
    for line in (text or "").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not _is_num(row.get("step")):
            continue
        for k, v in row.items():
            if k not in ("step", "time") and _is_num(v) and math.isfinite(v):
                found.setdefault(k, {})[row["step"]] = float(v)
    return {k: sorted(v.items()) for k, v in sorted(found.items())}


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _curves_svg(series: dict[str, list[tuple[float, float]]]) -> str | None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    curves = {k: pts for k, pts in series.items() if len(pts) >= 2}
    if not curves:
        return None
    ncols = min(3, len(curves))
    nrows = math.ceil(len(curves) / ncols)
    fig = Figure(figsize=(3.6 * ncols, 2.5 * nrows))
    for i, (key, pts) in enumerate(curves.items()):
        if len(pts) > MAX_POINTS:
            pts = pts[:: math.ceil(len(pts) / MAX_POINTS)] + [pts[-1]]
        ax = fig.add_subplot(nrows, ncols, i + 1)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.3, color="C0", marker="o" if len(pts) <= 20 else None, ms=3)
        ax.set_title(key, fontsize=9, parse_math=False)   # a metric name is text: "$" is no formula
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig_svg(fig)


def fig_svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "jobs-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def inline_svg(svg: str) -> str:
    """An SVG document as an element inside HTML: no XML prolog, DOCTYPE, metadata or namespace
    declarations (the HTML parser puts <svg> in its namespace), so the page names no URL at all."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    return svg.replace("<svg", '<svg class="figure" role="img"', 1)


# ---- the page --------------------------------------------------------------------------------
def build(store, target: str, dot: str | None = "auto") -> tuple[str, str]:
    """(HTML text, a short label for the default file name). `dot="auto"` uses Graphviz if on PATH."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise JobsError("jobs report draws with matplotlib, which is not installed: pip install 'jobs[report]'") from None
    if dot == "auto":
        dot = shutil.which("dot")
    idx = store.index()
    title, runs, seeds, highlight = _scope(store, idx, target)
    nodes, edges = _walk(store, idx, runs, seeds)
    shown = runs or sorted(n for n, w in nodes.items() if w == "run")
    views = [store.run(r) for r in shown]
    bad = problems(store, [n for n, w in nodes.items() if w == "art"] +
                   [a for v in views for a in (*v.inputs.values(), *v.outputs.values())])
    e = html.escape
    parts = [f"<h1>{e(title)}</h1>",
             f'<p class="meta">store {e(str(store.root))} · written {e(time.strftime("%Y-%m-%d %H:%M:%S %Z"))} '
             f"by <code>jobs report {e(target)}</code></p>"]
    if title.startswith("recipe "):
        parts.append(_chain_note(store, idx, target))
    if shown:
        parts.append("<nav><b>runs</b> " + " ".join(
            f'<a href="#run-{e(r)}">{e(_run_label(idx, r))} {e(r[:13])}</a>' for r in shown) + "</nav>")
    parts.append('<section id="lineage"><h2>Lineage</h2>')
    if nodes:
        parts.append('<div class="graph">' + inline_svg(_graph_svg(store, idx, nodes, edges, highlight, dot, bad)) + "</div>")
        corrupt = sorted(a for a, p in bad.items() if p)
        if corrupt:
            parts.append('<ul class="corrupt">' + "".join(
                f"<li>CORRUPT {e(bad[a])}</li>" for a in corrupt) + "</ul>")
        parts.append(f'<p class="meta">{sum(w == "run" for w in nodes.values())} runs (boxes), '
                     f'{sum(w == "art" for w in nodes.values())} artifacts (notes); arrows are labelled with the input or output '
                     f'role, dashed where a run will take its input from another run when it starts; an artifact made '
                     f'again by later runs shows one producer.</p>')
    else:
        parts.append("<p>no lineage recorded</p>")
    parts.append("</section>")
    from jobs.timeline import section
    parts.append(section(store, sorted(shown, key=lambda r: (store.run_spec(r).created or 0, r))))
    parts.append(_eval_section(store, idx, [n for n, w in nodes.items() if w == "art"], bad, set(shown)))
    for r in shown:
        parts.append(_run_section(store, idx, r, bad))
    return page(title, "\n".join(parts)), re.sub(r"[^A-Za-z0-9_.-]", "_", target)[:64]


def _chain_note(store, idx, recipe: str) -> str:
    """Which runs a RECIPE's report shows, and why those: one consistent chain of successful runs."""
    from jobs.chains import recipe_chain

    chain, left = recipe_chain(store, idx, recipe)
    e = html.escape
    used = ", ".join(f"{e(stage)} <code>{e(run[:13])}</code>" for stage, run in sorted(chain.items(), key=lambda x: x[1]))
    out = (f'<p class="chain">One chain of successful runs: the newest successful run of the last stage whose '
           f"inputs come from one chain, the runs it descends from, and for each other stage its newest successful "
           f"run whose inputs come from these runs. Runs: {used}.")
    if left:
        out += f" No such run of: {e(', '.join(left))}."
    return out + "</p>"


def _eval_section(store, idx, arts: list[str], bad: dict[str, str | None], runs=()) -> str:
    rows = []
    for a in sorted(arts):
        try:
            rec = store.artifact(a)
        except LineageError:  # an unreadable record: the graph shows it, the table cannot
            continue
        if rec.get("kind") != "eval-report":
            continue
        text = _read_small(Path(rec["path"]) / "results.json")
        try:
            results = json.loads(text) if text else None
        except ValueError:
            results = None
        if isinstance(results, dict):
            made = [p for p in idx.producer(a) if p["run"] in runs] or idx.producer(a)[:1]   # a shown run's, if any
            ins = {c["role"]: c["artifact"] for p in made[:1] for c in idx.edges_of(p["run"], "in")}
            data = next((x for role, x in sorted(ins.items()) if role != "model"), None)   # the eval data it scored
            rows.append((a, ins.get("model"), data, results))
    if not rows:
        return '<section id="eval"><h2>Evaluation</h2><p>no eval-report artifact in this lineage</p></section>'
    keys = sorted({k for *_, r in rows for k, v in r.items() if not isinstance(v, (dict, list))})
    e = html.escape
    head = ("<tr><th>report</th><th>model</th><th>data</th><th>verified</th>" + "".join(f"<th>{e(k)}</th>" for k in keys)
            + "</tr>")
    body = "".join(
        ("<tr class=\"corrupt\">" if bad.get(a) else "<tr>") + f"<td>{e(_art_label(idx, a))}</td>"
        f"<td>{e(_art_label(idx, m)) if m else '-'}</td><td>{e(_art_label(idx, d)) if d else '-'}</td>"
        f"<td>{e(_mark(bad.get(a)))}</td>"
        + "".join(f'<td class="num">{e(_fmt(r.get(k, "")))}</td>' for k in keys) + "</tr>" for a, m, d, r in rows)
    return f'<section id="eval"><h2>Evaluation</h2><table class="eval">{head}{body}</table></section>'


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _when(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) and ts else "-"


def _took(a: dict) -> str:
    return f"{a['end'] - a['start']:.1f} s" if _is_num(a.get("end")) and _is_num(a.get("start")) else "-"


def _run_section(store, idx, run: str, bad: dict[str, str | None]) -> str:
    e = html.escape
    v = store.run(run)
    s = v.spec
    out = [f'<section class="run" id="run-{e(run)}"><h2>{e(s.recipe or "?")}/{e(s.stage or "?")} '
           f'<span class="state state-{e(v.state)}">{e(v.state)}</span></h2>',
           f'<p class="meta">run {e(run)} · executor {e(str(s.executor))} · created {e(_when(s.created))}'
           + (f" · {e(v.reason)}" if v.reason else "") + "</p>"]
    series = read_series(RunDir(store.run_dir(run)).metrics)
    svg = _curves_svg(series)
    if svg:
        out.append('<h3>Metrics</h3><div class="curves">' + inline_svg(svg) + "</div>")
    if v.metrics:
        out.append("<h3>Last values</h3><table>" + "".join(
            f'<tr><td>{e(k)}</td><td class="num">{e(_fmt(x))}</td></tr>' for k, x in sorted(v.metrics.items())) + "</table>")
    io_rows = [("input", role, a) for role, a in sorted(v.inputs.items())] + \
              [("output", role, a) for role, a in sorted(v.outputs.items())]
    if io_rows:
        out.append("<h3>Inputs and outputs</h3><table>" + "".join(
            f"<tr><td>{d}</td><td>{e(role)}</td><td><code>{e(a)}</code></td><td>{e(', '.join(idx.names_of(a)))}</td>"
            f"<td>{e(_mark(bad.get(a)))}</td></tr>"
            for d, role, a in io_rows) + "</table>")
    if v.attempts:
        rows = "".join(
            f"<tr><td>#{e(str(a.get('attempt')))}</td><td>{e(str(a.get('job_id') or '-'))}</td><td>{e(str(a.get('host') or '-'))}</td>"
            f"<td>{e(_when(a.get('start')))}</td>"
            f"<td class=\"num\">{e(_took(a))}</td>"
            f"<td>{e(str(a.get('exit', 'running')))}</td><td>{e(str(a.get('reason') or a.get('error') or ''))}</td></tr>"
            for a in v.attempts)
        out.append("<h3>Attempts</h3><table><tr><th>attempt</th><th>job</th><th>host</th><th>start</th>"
                   f"<th>took</th><th>exit</th><th>why</th></tr>{rows}</table>")
    env = s.environment or {}
    code = s.code or {}
    facts = [("container", s.container or "none"),
             ("image", s.container_image or "none (ran in the host environment)"),
             ("environment digest", env.get("digest")), ("python", env.get("python")),
             ("code", (code.get("git_sha") or "not a git checkout") + (" + uncommitted changes" if code.get("dirty") else "")),
             ("code snapshot", code.get("snapshot")), ("run key", s.run_key),
             ("resources", json.dumps(s.resources or {}, sort_keys=True)), ("folder", str(store.run_dir(run)))]
    facts += [(f"tracker {k}", w) for k, w in sorted(v.trackers.items())]
    out.append("<h3>Environment</h3><table>" + "".join(
        f"<tr><td>{e(k)}</td><td><code>{e(str(x))}</code></td></tr>" for k, x in facts if x) + "</table>")
    pkgs = env.get("packages")
    if pkgs:
        listing = "\n".join(f"{k}=={x}" for k, x in sorted(pkgs.items())) if isinstance(pkgs, dict) else \
            "\n".join(map(str, pkgs))
        out.append(f"<details><summary>{len(pkgs)} installed distributions</summary><pre>{e(listing)}</pre></details>")
    out.append("<details><summary>config</summary><pre>"
               + e(json.dumps(s.config, indent=2, sort_keys=True)) + "</pre></details>")
    out.append("</section>")
    return "\n".join(out)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;
padding:0 16px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px;color:#444}.meta{color:#666;font-size:12px;margin:2px 0}
nav{margin:12px 0;font-size:13px}nav a{margin-right:10px;color:#1f5f9f}
table{border-collapse:collapse;font-size:12.5px;margin:4px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12px ui-monospace,Menlo,Consolas,monospace}pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:420px}
svg.figure{max-width:100%;height:auto;display:block}.graph,.curves{overflow-x:auto;margin:6px 0}
.state{font-size:12px;padding:1px 8px;border-radius:9px;background:#eee;vertical-align:middle}
.state-SUCCEEDED{background:#d4f0d4}.state-FAILED,.state-LOST,.state-CANCELLED{background:#f7d4d4}
.state-RUNNING,.state-PENDING,.state-QUEUED{background:#fff1c2}
tr.corrupt td,ul.corrupt{color:#a61b1b}
"""


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            # Nothing may be fetched: the page must look the same with no network.
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def write(store, target: str, out: Path | None) -> Path:
    """Build the report and write it to `out` or ./report-<ID>.html through a temp file and a
    rename (a reader never sees half a page); the folder must exist, the file is world-readable."""
    text, label = build(store, target)
    path = Path(out) if out else Path(f"report-{label}.html")
    if not path.parent.is_dir():
        raise JobsError(f"cannot write {path}: no folder {path.parent} (create it or choose another --out)")
    if path.is_dir():
        raise JobsError(f"cannot write {path}: it is a folder (give a file name with --out)")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path.absolute()
