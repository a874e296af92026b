"""A chain's timeline for `jobs report`: one row per attempt of each run, its bars on one time axis.

Each row draws, from the records alone, what the attempt waited (queued, then boot: jobs/cost.py
waits) and each phase runtime/entry.py timed (verify, ray_start, stage, ray_stop, gate, register), one
after another from the stage entry. A bar's width is its recorded seconds on the axis's one scale, so
bars compare across runs and attempts. Plain SVG written here (no plotting library, no script): the
page needs nothing from the network to show it.
"""
from __future__ import annotations

import html

from jobs.cost import PHASES, num, queue_span, waits

#: The drawing's width in pixels: the label column, then the time axis.
WIDTH, LABEL_W, ROW_H, BAR_H = 1100, 230, 24, 14
COLORS = {"queued": "#d0d0d0", "boot": "#9e9e9e", "verify": "#8fb8de", "ray_start": "#f2b36b", "stage": "#5b9b5b",
          "ray_stop": "#e08a3c", "gate": "#b07cc6", "register": "#c9a227"}


def bars(view) -> list[dict]:
    """Each attempt's bars: {attempt, kind, t (epoch start), seconds}, from the run's records."""
    out = []
    waited = {w["attempt"]: w for w in waits(view)}
    for a in view.attempts:
        n, start, batch = a.get("attempt"), num(a.get("start")), num(a.get("batch_start"))
        w = waited.get(n, {})
        if w.get("queued") is not None:   # from its submission to its start, as waits() measured it
            out.append({"attempt": n, "kind": "queued", "t": queue_span(view, a)[0], "seconds": w["queued"]})
        if w.get("boot") is not None:
            out.append({"attempt": n, "kind": "boot", "t": batch, "seconds": w["boot"]})
        t = start
        for p in PHASES:
            secs = num((a.get("phases") or {}).get(p))
            if secs is not None and t is not None:
                out.append({"attempt": n, "kind": p, "t": t, "seconds": secs})
                t += secs
    return out


def svg(store, runs: list[str]) -> str | None:
    """The timeline of `runs` (oldest first) as an inline <svg class="timeline">; None when no attempt
    recorded a time."""
    e = html.escape
    rows = []
    for r in runs:
        v = store.run(r)
        per = {}
        for b in bars(v):
            per.setdefault(b["attempt"], []).append(b)
        rows += [(v, n, bs) for n, bs in per.items()]
    if not rows:
        return None
    t0 = min(b["t"] for *_, bs in rows for b in bs)
    t1 = max(b["t"] + b["seconds"] for *_, bs in rows for b in bs)
    span = max(t1 - t0, 1e-3)
    scale = (WIDTH - LABEL_W - 10) / span   # pixels per second, the one scale of every bar
    top = 22
    height = top + ROW_H * len(rows) + 34
    parts = [f'<svg class="timeline" role="img" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
             f'data-seconds-per-px="{1 / scale:.6g}" font-family="system-ui,sans-serif" font-size="12">']
    parts.append(f'<text x="{LABEL_W}" y="14" fill="#555">0 s</text>'
                 f'<text x="{WIDTH - 10}" y="14" fill="#555" text-anchor="end">{span:.1f} s</text>')
    for i, (v, n, bs) in enumerate(rows):
        y = top + i * ROW_H
        label = f"{v.spec.stage} {v.id[:8]} #{n}"
        parts.append(f'<text x="4" y="{y + BAR_H - 2}">{e(label)}</text>')
        for b in bs:
            x = LABEL_W + (b["t"] - t0) * scale
            parts.append(f'<rect class="bar bar-{b["kind"]}" data-run="{e(v.id)}" data-attempt="{n}" '
                         f'data-kind="{b["kind"]}" data-seconds="{b["seconds"]:.6g}" x="{x:.3f}" y="{y}" '
                         f'width="{b["seconds"] * scale:.3f}" height="{BAR_H}" fill="{COLORS[b["kind"]]}">'
                         f'<title>{e(label)} {b["kind"]} {b["seconds"]:.3f} s</title></rect>')
    y = top + ROW_H * len(rows) + 14
    x = LABEL_W
    for kind, color in COLORS.items():   # the legend
        parts.append(f'<rect class="legend" x="{x}" y="{y}" width="12" height="12" fill="{color}"/>'
                     f'<text x="{x + 16}" y="{y + 10}">{kind}</text>')
        x += 24 + 8 * len(kind)
    parts.append("</svg>")
    return "".join(parts)


def section(store, runs: list[str]) -> str:
    drawn = svg(store, runs)
    if drawn is None:
        return '<section id="timeline"><h2>Timeline</h2><p>no attempt has recorded its times</p></section>'
    return ('<section id="timeline"><h2>Timeline</h2><div class="graph">' + drawn + "</div>"
            '<p class="meta">One row per attempt of each run, on one time axis: what it waited (queued, boot) and '
            "each phase the job timed, from the records; a bar's width is its recorded seconds.</p></section>")
