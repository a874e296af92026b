"""`jobs reproduce` and `jobs diff`: re-run a record exactly, and say how two runs differ.

Reproduction uses only the record: the code snapshot artifact (put first on PYTHONPATH, so the
job imports the recorded code, not today's checkout), the resolved config, and the input artifact
IDs, each verified first. The environment is compared with the recorded one and a mismatch stops
the run unless `--allow-env-drift`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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


def package_drift(was: dict, now: dict) -> list[str]:
    names = sorted(set(was) | set(now))
    return [f"{n} {was.get(n, '-')} -> {now.get(n, '-')}" for n in names if was.get(n) != now.get(n)]


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


def reproduce(store: Store, run_id: str, allow_env_drift: bool, echo: Callable[[str], None] = print) -> tuple[str, Comparison]:
    from jobs.executors.local import LocalExecutor
    from lineage.ids import run_key
    from jobs.provenance import python_env

    old = store.run(run_id)
    spec = old.spec
    if old.state != RunState.SUCCEEDED:
        raise JobsError(f"run {run_id} is {old.state}: only a SUCCEEDED run has outputs to reproduce")
    snapshot = spec["code"].get("snapshot")
    if not snapshot:
        raise JobsError(f"run {run_id} recorded no code snapshot: it cannot be reproduced exactly")
    for what, art in [("code", snapshot), *sorted(old.inputs.items())]:
        store.verify(art)  # raises Corrupt, naming the files
    echo(f"verified code {snapshot[:16]} and inputs " + (", ".join(f"{r}={a[:16]}" for r, a in sorted(old.inputs.items())) or "(none)"))

    env = python_env()
    drift = package_drift(spec["environment"].get("packages", {}), env["packages"])
    if spec["environment"].get("python") != env["python"]:
        drift.insert(0, f"python {spec['environment'].get('python')} -> {env['python']}")
    if drift:
        summary = "; ".join(drift[:5]) + (f"; … {len(drift) - 5} more" if len(drift) > 5 else "")
        if not allow_env_drift:
            raise JobsError(f"environment differs from the record: {summary} (--allow-env-drift to proceed)")
        echo(f"environment drift (allowed): {summary}")
    else:
        echo(f"environment matches the record ({env['digest'][:23]})")

    code_dir = Path(store.artifact(snapshot)["path"])
    new_spec = {k: v for k, v in spec.items() if k not in ("id", "created", "run_key")}
    new_spec.update(inputs=dict(old.inputs), pending_inputs={}, executor="local", environment=env,
                    code={**spec["code"], "root": str(code_dir)}, reproduces=run_id)
    new_spec["run_key"] = run_key(new_spec)
    new_id = store.create_run(new_spec)
    echo(f"reproducing {run_id} ({spec['recipe']}/{spec['stage']}) as {new_id} with the code in {code_dir}")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(code_dir), saved] if p)
    try:
        LocalExecutor().launch(store, [new_id], echo=echo)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    new = store.run(new_id)
    if new.state != RunState.SUCCEEDED:
        raise JobsError(f"the reproduction {new_id} ended {new.state}: {new.reason} (see `jobs logs {new_id}`)")
    return new_id, compare(store, old, new)


def command(store: Store, run: str, allow_env_drift: bool, echo: Callable[[str], None] = print) -> int:
    """`jobs reproduce`: 0 when the outputs came out bit for bit the same, else 1 with what moved."""
    run_id = store.index().resolve_run(run)
    store.ensure_writable()
    new_id, cmp = reproduce(store, run_id, allow_env_drift, echo)
    echo("\n".join(outcome(run_id, new_id, cmp)))
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
    fa, fb = flatten(va.spec["config"]), flatten(vb.spec["config"])
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k, "<unset>") != fb.get(k, "<unset>"):
            lines.append(f"config  {k}: {fa.get(k, '<unset>')} -> {fb.get(k, '<unset>')}")
    ca, cb = va.spec["code"], vb.spec["code"]
    if ca.get("snapshot") != cb.get("snapshot"):
        lines.append(f"code    git {str(ca.get('git_sha'))[:12]} -> {str(cb.get('git_sha'))[:12]}, "
                     f"snapshot {str(ca.get('snapshot'))[:16]} -> {str(cb.get('snapshot'))[:16]}")
        if ca.get("snapshot") and cb.get("snapshot"):
            lines += [f"code    {change}" for change in manifest_diff(store, ca["snapshot"], cb["snapshot"])]
    ea, eb = va.spec["environment"], vb.spec["environment"]
    if va.spec.get("container_image") != vb.spec.get("container_image"):
        lines.append(f"env     image {va.spec.get('container_image')} -> {vb.spec.get('container_image')}")
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
