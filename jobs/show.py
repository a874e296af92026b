"""Text renderings of runs, artifacts and lineage graphs for the terminal."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Iterable

from jobs.cost import PHASES, STAGE_PHASES, usage, waits


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} TiB"


def print_json(doc, lines: bool = False) -> None:
    """`--json`: `doc` as one JSON document, strict (NaN and infinities as null: lineage.records
    strict_json) with stable keys, which `json.loads`, `python -m json.tool` and jq read whole;
    `--jsonl` (`lines`, `doc` a list): JSON Lines, one object per line, for a stream."""
    from lineage.records import strict_json

    if lines:
        for item in doc:
            print(strict_json(item, sort_keys=True, default=str))
    else:
        print(strict_json(doc, sort_keys=True, default=str))


def print_runs(rows: Iterable, as_json: bool = False, store=None, metric: str | None = None,
               lines: bool = False) -> None:
    """`jobs list`: a table, or (`as_json`) one JSON list of the runs (`lines`: one object per run and
    line), with stable keys; with the store, each run's duration, end and metrics too
    (jobs/metrics.py), and `metric` as a column."""
    from jobs.metrics import check_known, duration, facts, number

    rows = list(rows)
    more = {r["id"]: facts(store.run(r["id"])) for r in rows} if store is not None else {}
    if metric:
        check_known(metric, [m["metrics"] for m in more.values()])
    if as_json or lines:
        print_json([{**{k: r[k] for k in ("id", "recipe", "stage", "state", "executor", "created")},
                     **more.get(r["id"], {})} for r in rows], lines)
        return
    col = f"  {metric}" if metric else ""
    print(f"{'RUN':<36}  {'RECIPE':<8} {'STAGE':<9} {'STATE':<10} {'EXECUTOR':<8} {'CREATED':<19}  {'TOOK':>7}{col}")
    for r in rows:
        f = more.get(r["id"], {})
        val = f"  {number(f.get('metrics', {}).get(metric))}" if metric else ""
        print(f"{r['id']:<36}  {r['recipe']:<8} {r['stage']:<9} {_state(store, r):<10} {r['executor'] or '-':<8} "
              f"{_when(r['created']):<19}  {duration(f.get('duration_s')):>7}{val}")


def _state(store, row: dict) -> str:
    """A running run whose process is gone without recording an end is LOST here, as `jobs status`
    folds it (jobs.reconcile.lost; computed on read, nothing written)."""
    if store is None or row["state"] != "RUNNING":
        return row["state"] or "?"
    from jobs.reconcile import lost

    return lost(store.run(row["id"])).state


def print_artifacts(idx, rows: Iterable, as_json: bool = False, lines: bool = False) -> None:
    """`jobs artifacts`: a table, or one JSON list of the artifacts (`lines`: one object per line)."""
    if as_json or lines:
        print_json([{"id": a["id"], "kind": a["kind"], "size": a["size"], "created": a["created"],
                     "names": idx.names_of(a["id"])} for a in rows], lines)
        return
    print(f"{'ARTIFACT':<20} {'KIND':<12} {'SIZE':>10}  {'CREATED':<19}  NAMES")
    for a in rows:
        names = ", ".join(idx.names_of(a["id"])) or "-"
        print(f"{a['id'][:20]:<20} {a['kind']:<12} {size(a['size']):>10}  {_when(a['created'])}  {names}")


def print_record(store, ident: str, as_json: bool = False) -> None:
    """`jobs show`: a run (ID or prefix) or an artifact (art_…, NAME:latest|vN), verified: an
    artifact, `:latest` above all, is never shown as usable without saying its files changed.
    `as_json`: one JSON document (a run: its record, state, inputs, outputs, attempts; an artifact:
    its record, names and whether it verifies)."""
    from lineage.errors import Corrupt

    from jobs.reconcile import record_usage

    idx = store.index()
    if not (ident.startswith("art_") or ":" in ident):
        run_id = idx.resolve_run(ident)
        record_usage(store, [store.run(run_id)])   # a Slurm attempt's accounting, once it has ended
        if not as_json:
            return print_run(store, idx, run_id)
        from jobs.metrics import facts
        v = store.run(run_id)
        doc = {"type": "run", "id": v.id, "state": v.state, "reason": v.reason, "updated": v.updated,
               "spec": v.spec.to_json(), "inputs": v.inputs, "outputs": v.outputs, "attempts": v.attempts, "gate": v.gate, "trackers": v.trackers,
               "waited": waits(v), "usage": usage(v), **facts(v)}   # metrics, duration_s, ended
        print_json(doc)
        return None
    art = store.resolve_artifact(ident)
    try:
        store.verify(art)
        problem = None
    except Corrupt as e:
        problem = str(e)
    if as_json:
        doc = {"type": "artifact", **store.artifact(art), "names": idx.names_of(art), "verified": problem is None,
               "problem": problem}
        print_json(doc)
        return None
    print_artifact(store, idx, art)
    print("verified  ok" if problem is None else f"verified  CORRUPT {problem}")


def print_run(store, idx, run_id: str) -> None:
    from jobs.reconcile import lost

    v = lost(store.run(run_id))   # a vanished process: LOST, as every view says
    s = v.spec
    print(f"run       {v.id}")
    print(f"recipe    {s.recipe} / {s.stage}   executor {s.executor}")
    print(f"state     {v.state}" + (f"  ({v.reason})" if v.reason else ""))
    print(f"created   {_when(s.created)}   updated {_when(v.updated)}")
    code = s.code
    dirty = f"  (+ uncommitted {code.get('diff_digest') or 'changes'})" if code.get("dirty") else ""
    print(f"code      {code.get('git_sha') or 'not a git checkout'}{dirty}")
    env = s.environment
    print(f"env       python {env.get('python')}  {env.get('digest')}")
    if s.container_image:
        ran = sorted({a["image"] for a in v.attempts if a.get("image")})
        bundle = (s.runtime_bundle or {}).get("digest")
        print(f"image     {s.container_image}" + (f"  ({s.container_runtime})" if s.container_runtime else "")
              + (f"   ran in {', '.join(ran)}" if ran and ran != [s.container_image] else ""))
        if bundle:
            pkgs = " ".join(f"{k}=={x}" for k, x in sorted((s.runtime_bundle.get("packages") or {}).items()))
            print(f"bundle    {bundle}  {pkgs}")
    if s.run_key:
        print(f"run_key   {s.run_key}")
    if s.sweep:
        print(f"sweep     {_sweep_point(s.sweep)}")
    for role, art in sorted(v.inputs.items()):
        print(f"input     {role:<10} {art}" + _own_name(idx, art) + _from_sweep(store, art))
    for role, ref in sorted(s.pending_inputs.items()):
        if role not in v.inputs:
            print(f"input     {role:<10} (from run {ref['run']} output {ref['output']}, when it starts)")
    for name, art in sorted(v.outputs.items()):
        print(f"output    {name:<10} {art}" + _own_name(idx, art))
    if v.attempts:
        print(f"attempts  {len(v.attempts)}" + (f"   one W&B run {v.trackers['wandb_run_id']}" if v.trackers.get("wandb_run_id") else ""))
    waited = {w["attempt"]: w for w in waits(v)}
    used = {u["attempt"]: u for u in usage(v)}
    for a in v.attempts:
        took = f"{a['end'] - a['start']:.1f} s" if a.get("end") and a.get("start") else ("running" if "exit" not in a else "-")
        why = a.get("reason") or (a.get("error") if a.get("exit") == "error" else None)
        kernels = f" ({a['cpu_kernels']})" if a.get("cpu_kernels") else ""
        print(f"attempt   #{a['attempt']} job {a.get('job_id') or '-'} on {a.get('host')}{kernels}  {_when(a.get('start'))}  {took}  "
              f"exit {a.get('exit', '-')}" + (f"  class {a['failure_class']}" if a.get("failure_class") else "")
              + (f"  ({why})" if why else ""))
        b = a.get("boundary")   # runtime/entry.py: an upstream program refused its first GPU-only request here
        if isinstance(b, dict):
            print(f"boundary  stopped at GPU boundary: {b.get('file')}:{b.get('line')} ({b.get('message')})")
        w = waited.get(a.get("attempt")) or {}   # jobs/cost.py: before the stage entry, derived from the records
        if w.get("queued") is not None or w.get("boot") is not None:
            print("waited    " + "  ".join(f"{k} {w[k]:.1f} s" for k in ("queued", "boot") if w.get(k) is not None))
        ph = a.get("phases") or {}   # runtime/entry.py: where the attempt's time went, in the order it went
        if ph:
            inner = "  ".join(f"{k[6:]} {ph[k]:.1f} s" for k in STAGE_PHASES if isinstance(ph.get(k), (int, float)))
            print("phases    " + "  ".join(f"{k} {ph[k]:.1f} s" for k in PHASES if isinstance(ph.get(k), (int, float)))
                  + (f"  (in stage: {inner})" if inner else ""))
        u = used.get(a.get("attempt")) or {}   # jobs/cost.py: sacct's accounting, or a local run's own times
        if u.get("source"):
            how = "sacct" if u["source"] == "sacct" else "local: its own times, the run's resources"
            print(f"used      elapsed {_secs(u['elapsed_s'])} s  cpus {_val(u['cpus'])}  gpus {_val(u['gpus'])}  "
                  f"cpu-h {_hours(u['cpu_hours'])}  gpu-h {_hours(u['gpu_hours'])}  max RSS {_rss(u['max_rss_bytes'])}  ({how})")
    for c in v.gate:   # the results gate (stages/gate.py): what the outputs showed, one check a line
        print(f"gate      {'pass' if c.get('ok') else 'FAIL'}  {c.get('name', '?'):<8} {c.get('detail', '')}")
    for name, where in sorted(v.trackers.items()):
        print(f"tracker   {name:<10} {where}")
    if v.metrics:
        print("metrics   " + "  ".join(f"{k}={_num(x)}" for k, x in sorted(v.metrics.items())))
    print(f"folder    {store.run_dir(run_id)}")
    if s.reproduces:
        print(f"reproduces {s.reproduces}")
    for what, d in sorted((s.env_drift or {}).items()):
        ran = d.get("ran")
        print(f"drift     {what}: recorded {d.get('recorded')}, ran {ran}"
              + (f" ({'; '.join(d['changes'][:5])})" if d.get("changes") else ""))
    print("config    " + json.dumps(s.config, sort_keys=True))


def _val(x) -> str:
    """A measured value, or `-` for one not measured (never 0)."""
    return "-" if x is None else str(x)


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _hours(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _rss(x: int | None) -> str:
    return "-" if x is None else size(x)


def print_cost(store, ident: str, as_json: bool = False) -> None:
    """`jobs show ART --cost`: what the artifact (or run) cost, over its whole ancestry (jobs/cost.py
    ancestry): a row per run, every attempt summed, failed ones too, and the total; from the records
    alone (a Slurm attempt's accounting recorded from sacct first, once it has ended)."""
    from jobs.cost import ancestry, run_cost, total
    from jobs.reconcile import record_usage

    runs = ancestry(store, store.index(), ident)
    rows = [run_cost(v) for v in record_usage(store, [store.run(r) for r in runs])]
    if as_json:
        return print_json({"target": ident, "runs": rows, "total": total(rows)})
    shown = (*PHASES, *STAGE_PHASES)   # the stage's own (load, train, save) are inside STAGE
    heads = [("RUN", 13), ("STAGE", 9), ("ATT", 3), ("QUEUED", 7), *((p.upper(), max(len(p), 6)) for p in shown),
             ("ELAPSED", 8), ("CPU-H", 8), ("GPU-H", 8), ("MAX RSS", 9)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, (_, w)) in enumerate(zip(cells, heads)))

    def cells(r: dict) -> list[str]:
        return [str(r["attempts"]), _secs(r["queued"]), *(_secs(r["phases"][p]) for p in shown),
                _secs(r["elapsed_s"]), _hours(r["cpu_hours"]), _hours(r["gpu_hours"]), _rss(r["max_rss_bytes"])]

    print(f"cost of {ident}: {len(rows)} run{'s' if len(rows) != 1 else ''}, oldest first (seconds; - not measured)")
    print(line([h for h, _ in heads]))
    for r in rows:
        print(line([r["run"][:13], r["stage"][:9], *cells(r)]))
    tot = total(rows)
    print(line(["total", "", *cells(tot)]))
    if tot["unmeasured"]:
        print(f"{tot['unmeasured']} attempt(s) not measured yet (running, or not yet ended in sacct): "
              "left out of elapsed and hours")
    return None


def _own_name(idx, art: str) -> str:
    """'  (tiny/sft/model:v3)': the version the artifact was registered as, when it has one."""
    from jobs.chains import own_name

    own = own_name(idx, art) if idx is not None else None
    return f"  ({own})" if own else ""


def _sweep_point(sw: dict) -> str:
    return f"{sw['id']} point {sw['point']} ({' '.join(f'{k}={x}' for k, x in sw['values'].items())})"


def _from_sweep(store, art: str) -> str:
    """'  (from sweep … point …)' when the input was made by a sweep's point."""
    from lineage.errors import LineageError

    try:
        producer = store.artifact(art).get("producer")
        sw = store.run_spec(producer).sweep if producer else None
    except (LineageError, OSError, ValueError):
        return ""
    return f"  (from sweep {_sweep_point(sw)})" if sw else ""


def _num(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _mode(path: Path) -> str:
    """The permission bits on disk (`ls -l` style and octal): the manifest keeps only the executable bit."""
    try:
        st = os.lstat(path)
    except OSError:
        return "gone"
    return f"{stat.filemode(st.st_mode)} {stat.S_IMODE(st.st_mode):04o}"


def print_artifact(store, idx, art_id: str) -> None:
    from jobs.errors import one_line   # a file name's control sequence is shown escaped, not run

    a = store.artifact(art_id)
    print(f"artifact  {a['id']}")
    print(f"kind      {a['kind']}   {len(a['manifest'])} files, {size(a['size'])}")
    print(f"names     {', '.join(idx.names_of(art_id)) or '-'}")
    print(f"path      {one_line(str(a['path']))}")
    print(f"producer  {a.get('producer') or '-'}")
    from jobs.add import origin
    if origin(a):
        print(f"origin    {origin(a)}")
    consumers = sorted({r['run'] for r in idx.consumers(art_id)})
    print(f"used by   {', '.join(consumers) or '-'}")
    print(f"created   {_when(a['created'])}")
    print(f"modes     {_mode(Path(a['path']))} (the folder; each file's below, as on disk now)")
    for e in a["manifest"][:20]:
        where = Path(a["path"]) / e["path"] if a.get("is_dir", True) else Path(a["path"])
        print(f"  {e['digest'][:19]}  {_mode(where)}  {size(e['size']):>10}  {one_line(e['path'])}")
    if len(a["manifest"]) > 20:
        print(f"  … {len(a['manifest']) - 20} more files")


# ---- lineage --------------------------------------------------------------------------------
def _graph(idx, art_id: str):
    """Nodes (ID -> label) and edges of everything upstream and downstream of `art_id`."""
    from lineage.graph import walk

    def label_art(a: str) -> str:   # its own version: a later re-run of the same bytes is not what it was made as
        from jobs.chains import own_name
        return f"{a[:12]} {own_name(idx, a) or ''}".strip()

    def label_run(r: str) -> str:
        row = idx.run_row(r)
        return f"{row['recipe']}/{row['stage']} {r[:13]}" if row else r[:13]

    kinds, edges = walk(idx, [art_id])
    nodes = {n: label_art(n) if kind == "art" else label_run(n) for n, kind in kinds.items()}
    return nodes, sorted(edges)


def lineage(store, idx, art_id: str, fmt: str = "text") -> str | dict:
    """An artifact's graph as text, mermaid or dot; `json`: the document (for `print_json`)."""
    from jobs.add import origin
    from lineage.errors import LineageError

    nodes, edges = _graph(idx, art_id)
    for n in nodes:   # an artifact a user added: its origin (--source, --revision) on its label
        if n.startswith("art_") and not idx.producer(n):
            try:
                where = origin(store.artifact(n))
            except LineageError:   # a record gc removed or damage: the graph still shows the node
                where = None
            nodes[n] += f" [{where}]" if where else ""
    if fmt == "json":
        return {"artifact": art_id,
                "nodes": [{"id": n, "type": "artifact" if n.startswith("art_") else "run", "label": nodes[n]}
                          for n in sorted(nodes)],
                "edges": [{"from": a, "to": b, "role": role} for a, b, role in edges]}
    if fmt == "mermaid":
        ids = {n: f"n{i}" for i, n in enumerate(sorted(nodes))}
        lines = ["graph LR"]
        for n in sorted(nodes):
            shape = ('(["', '"])') if n.startswith("art_") else ('["', '"]')
            lines.append(f"  {ids[n]}{shape[0]}{nodes[n]}{shape[1]}")
        lines += [f"  {ids[a]} -->|{role}| {ids[b]}" for a, b, role in edges]
        return "\n".join(lines)
    if fmt == "dot":
        lines = ["digraph lineage {", "  rankdir=LR;"]
        for n in sorted(nodes):
            shape = "ellipse" if n.startswith("art_") else "box"
            lines.append(f'  "{n}" [label="{nodes[n]}", shape={shape}];')
        lines += [f'  "{a}" -> "{b}" [label="{role}"];' for a, b, role in edges]
        lines.append("}")
        return "\n".join(lines)
    return _text_tree(idx, art_id, nodes)


def _text_tree(idx, art_id: str, nodes: dict[str, str]) -> str:
    lines = [f"{nodes[art_id]}", "ancestry:"]

    def branch(a: str, depth: int, seen: set, links, across: str, arrow: str) -> None:
        for link in links(a):
            lines.append("  " * depth + f"{arrow} {nodes[link['run']]}  (as {link['role']})")
            if link["run"] in seen:
                continue
            seen.add(link["run"])
            for e in idx.edges_of(link["run"], across):
                lines.append("  " * (depth + 1) + f"{arrow} [{e['role']}] {nodes.get(e['artifact'], e['artifact'][:12])}")
                branch(e["artifact"], depth + 2, seen, links, across, arrow)

    n = len(lines)
    branch(art_id, 1, set(), idx.producer, "in", "<-")
    if len(lines) == n:
        lines.append("  (registered directly, no producing run)")
    lines.append("descendants:")
    n = len(lines)
    branch(art_id, 1, set(), idx.consumers, "out", "->")
    if len(lines) == n:
        lines.append("  (none yet)")
    return "\n".join(lines)
