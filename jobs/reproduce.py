"""`jobs reproduce` and `jobs diff`: re-run a record exactly, and say how two runs differ.

A reproduction goes through the one submit path (jobs/submit.py) with a plan made from the record
alone (jobs/plan.py `plan_from_record`): the code snapshot artifact (first on the job's PYTHONPATH,
so the job imports the recorded code, not today's checkout), the resolved config and the input
artifact IDs, each verified first, on the executor and profile the record names. The image and the
Python environment it would run in now are compared with the record's; a difference stops it before
anything is recorded unless `--allow-env-drift`, and the new record then says what drifted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from jobs.drift import package_drift
from jobs.errors import JobsError
from lineage import Store
from lineage.states import RunState
from lineage.store import RunView


@dataclass
class Comparison:
    identical: bool
    outputs: dict[str, tuple[str | None, str | None]]
    files: dict[str, list[str]] = field(default_factory=dict)
    metrics: dict[str, tuple] = field(default_factory=dict)
    corrupt: list[str] = field(default_factory=list)  # outputs whose files no longer match their records


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def manifest_diff(store: Store, a: str | None, b: str | None) -> list[str]:
    if not a or not b:
        return ["(missing on one side)"]
    ma = {e["path"]: e for e in store.artifact(a)["manifest"]}
    mb = {e["path"]: e for e in store.artifact(b)["manifest"]}
    return ([f"-{p}" for p in sorted(ma.keys() - mb.keys())] + [f"+{p}" for p in sorted(mb.keys() - ma.keys())]
            + [f"~{p}" for p in sorted(ma.keys() & mb.keys()) if ma[p] != mb[p]])


def compare(store: Store, old: RunView, new: RunView) -> Comparison:
    """Equal artifact IDs mean equal manifests; bit for bit also needs both sides' files to still
    match those manifests, so every output of both runs is verified."""
    from lineage.errors import LineageError

    names = sorted(set(old.outputs) | set(new.outputs))
    outputs = {n: (old.outputs.get(n), new.outputs.get(n)) for n in names}
    corrupt = []
    for art in sorted({a for pair in outputs.values() for a in pair if a}):
        try:
            store.verify(art)
        except LineageError as e:  # Corrupt files or a Damaged record
            corrupt.append(str(e))
    cmp = Comparison(identical=not corrupt and all(a == b and a for a, b in outputs.values()), outputs=outputs,
                     corrupt=corrupt)
    for n, (a, b) in outputs.items():
        if a != b:
            cmp.files[n] = manifest_diff(store, a, b)
    for k in sorted(set(old.metrics) & set(new.metrics)):
        a, b = old.metrics[k], new.metrics[k]
        if a != b and isinstance(a, (int, float)) and isinstance(b, (int, float)):
            cmp.metrics[k] = (a, b, b - a)
    return cmp


def reproduce(store: Store, run_id: str, allow_env_drift: bool, wait: bool = True,
              echo: Callable[[str], None] = print) -> tuple[str, Comparison | None]:
    """Submit `run_id` again through the one submit path, on the executor and profile its record
    names, and compare outputs once it ends. `wait=False` returns after a Slurm submission (None)."""
    from jobs.submit import Request, submit

    old = store.run(run_id)
    spec = old.spec
    if old.state != RunState.SUCCEEDED:
        raise JobsError(f"run {run_id} is {old.state}: only a SUCCEEDED run has outputs to reproduce")
    executor = spec.executor or "local"
    req = Request(recipe=spec.recipe, stages=spec.stage, executor=executor, store=str(store.root),
                  profile=spec.profile if executor == "slurm" else None, reproduces=run_id,
                  allow_env_drift=allow_env_drift, allow_unpinned=allow_env_drift)
    where = executor + (f", profile {spec.profile}" if executor == "slurm" and spec.profile else "")
    echo(f"reproducing {run_id} ({spec.recipe}/{spec.stage}) on {where} with the code snapshot "
         f"{str(spec.code.get('snapshot'))[:16]} and inputs "
         + (", ".join(f"{r}={a[:16]}" for r, a in sorted(old.inputs.items())) or "(none)"))
    (new_id,) = submit(req, echo).runs
    if executor == "slurm":
        if not wait:
            echo(f"{new_id} submitted; when it has ended: jobs reproduce --compare {new_id}")
            return new_id, None
        try:
            wait_for(store, new_id, echo)
        except KeyboardInterrupt:
            echo(f"\nstopped waiting; the job goes on. When it has ended: jobs reproduce --compare {new_id}")
            raise
    return new_id, compare_ended(store, new_id)


def wait_for(store: Store, run_id: str, echo: Callable[[str], None], poll_s: float = 2.0) -> RunView:
    """Poll the run as `jobs status` does (recording an end only Slurm saw) until it has ended,
    saying each change of its state once."""
    import time

    from jobs.reconcile import statuses
    from lineage.states import TERMINAL

    said = None
    while True:
        ((view, live),) = statuses(store, [run_id])
        if view.state in TERMINAL:
            return view
        now = view.state + (f" (Slurm: {live.state}{', ' + live.reason if live.reason else ''})" if live else "")
        if now != said:
            echo(f"{run_id}  {view.spec.stage:<9} {now}")
            said = now
        time.sleep(poll_s)


def compare_ended(store: Store, new_id: str) -> Comparison:
    """The comparison of an ended reproduction with the run its record says it reproduces."""
    from lineage.states import TERMINAL

    new = store.run(new_id)
    old_id = new.spec.reproduces
    if not old_id:
        raise JobsError(f"run {new_id} is not a reproduction: its record names no run it reproduces")
    if new.state not in TERMINAL:
        raise JobsError(f"the reproduction {new_id} is {new.state}: compare it when it has ended (`jobs status {new_id}`)")
    if new.state != RunState.SUCCEEDED:
        raise JobsError(f"the reproduction {new_id} ended {new.state}: {new.reason} (see `jobs logs {new_id}`)")
    return compare(store, store.run(old_id), new)


def command(store: Store, run: str, allow_env_drift: bool = False, no_wait: bool = False, compare_only: bool = False,
            echo: Callable[[str], None] = print) -> int:
    """`jobs reproduce RUN`: 0 when the outputs came out bit for bit the same, else 1 with what moved.
    `--compare NEW` compares an ended reproduction (one submitted with `--no-wait`) with its original."""
    run_id = store.index().resolve_run(run)
    if compare_only:
        cmp = compare_ended(store, run_id)
        old_id, new_id = store.run(run_id).spec.reproduces, run_id
    else:
        store.ensure_writable()
        old_id = run_id
        new_id, cmp = reproduce(store, run_id, allow_env_drift, wait=not no_wait, echo=echo)
        if cmp is None:
            return 0
    echo("\n".join(outcome(old_id, new_id, cmp)))
    return 0 if cmp.identical else 1


def outcome(run_id: str, new_id: str, cmp: Comparison) -> list[str]:
    """What `jobs reproduce` prints at the end: bit for bit, or every output, file and metric that moved."""
    if cmp.identical:
        return [f"reproduced bit for bit: {new_id} has the same outputs as {run_id}: "
                + " ".join(f"{n}={a[:16]}" for n, (a, _) in cmp.outputs.items())]
    lines = [f"NOT reproduced: {new_id} differs from {run_id}" if not cmp.corrupt else
             f"NOT reproduced: the outputs of {new_id} or {run_id} do not verify"]
    lines += [f"  CORRUPT {problem}" for problem in cmp.corrupt]
    for name, (a, b) in cmp.outputs.items():
        if a != b:
            lines.append(f"  output {name}: {a} -> {b}")
            lines += [f"    {change}" for change in cmp.files.get(name, [])]
    lines += [f"  metric {k}: {a} -> {b} ({d:+.4g})" for k, (a, b, d) in cmp.metrics.items()]
    return lines


def diff(store: Store, a: str, b: str) -> list[str]:
    """Human-readable differences between two runs: config, code, environment, inputs, outputs."""
    va, vb = store.run(a), store.run(b)
    lines = []
    fa, fb = flatten(va.spec.config), flatten(vb.spec.config)
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k, "<unset>") != fb.get(k, "<unset>"):
            lines.append(f"config  {k}: {fa.get(k, '<unset>')} -> {fb.get(k, '<unset>')}")
    ca, cb = va.spec.code, vb.spec.code
    if ca.get("snapshot") != cb.get("snapshot"):
        lines.append(f"code    git {str(ca.get('git_sha'))[:12]} -> {str(cb.get('git_sha'))[:12]}, "
                     f"snapshot {str(ca.get('snapshot'))[:16]} -> {str(cb.get('snapshot'))[:16]}")
        if ca.get("snapshot") and cb.get("snapshot"):
            lines += [f"code    {change}" for change in manifest_diff(store, ca["snapshot"], cb["snapshot"])]
    ea, eb = va.spec.environment, vb.spec.environment
    if va.spec.container_image != vb.spec.container_image:
        lines.append(f"env     image {va.spec.container_image} -> {vb.spec.container_image}")
    ba, bb = (va.spec.runtime_bundle or {}).get("digest"), (vb.spec.runtime_bundle or {}).get("digest")
    if ba != bb:
        lines.append(f"env     runtime bundle {ba} -> {bb}")
    if ea.get("digest") != eb.get("digest"):
        lines += [f"env     {d}" for d in package_drift(ea.get("packages", {}), eb.get("packages", {}))]
        if ea.get("python") != eb.get("python"):
            lines.append(f"env     python {ea.get('python')} -> {eb.get('python')}")
    for role in sorted(set(va.inputs) | set(vb.inputs)):
        if va.inputs.get(role) != vb.inputs.get(role):
            lines.append(f"input   {role}: {va.inputs.get(role)} -> {vb.inputs.get(role)}")
    for name in sorted(set(va.outputs) | set(vb.outputs)):
        if va.outputs.get(name) != vb.outputs.get(name):
            lines.append(f"output  {name}: {va.outputs.get(name)} -> {vb.outputs.get(name)}")
    return lines
