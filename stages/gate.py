"""The results gate: what a stage's outputs must satisfy before the runtime registers them.

A stage that returned its folders may still have done nothing worth keeping: trained zero steps, a
loss that went to NaN, a rollout or an evaluation that generated no token, a data set short of the
rows its config asked for, weights that do not load. Each stage's optional `gate(ctx, produced) ->
[Check]` (stages/contract.py) names what fits it, built from the checks here; runtime/entry.py runs
it after `run(ctx)` returns and before anything is registered. One failed check fails the run with
its line ("gate: pretrain/loss is not finite at step 3"), and no output becomes an artifact.

The checks read what the stage left behind: its metrics.jsonl (every `ctx.log`, in the run's
folder, across attempts), its output folders, their manifests. Torch and transformers are imported
only inside the checks that load weights.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from lineage.layout import RunDir

#: A model with fewer weight bytes than this is loaded whole (every tensor read and checked finite);
#: a larger one by its config and the safetensors headers alone, which cost no weight read.
WHOLE_LOAD_BYTES = 1 << 30


@dataclass(frozen=True)
class Check:
    """One thing the gate looked at: its name ("steps", "loss", "tokens", "rows", "loads"), whether it
    held, and one line saying what was found."""

    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class GateFailed(Exception):
    """A stage's outputs failed the gate; the message is the run's reason, one line."""


def evaluate(gate: Callable | None, ctx, produced: dict[str, Path]) -> list[Check]:
    """The stage's checks (none when it has no gate). A check that cannot even be made (a file it
    reads is missing or unreadable) is a failed check saying so, never a crash of the job."""
    if gate is None:
        return []
    try:
        return list(gate(ctx, {k: Path(v) for k, v in produced.items()}))
    except Exception as e:  # the gate's own inputs are broken: that is the finding
        return [Check("gate", False, f"the checks could not be made: {type(e).__name__}: {' '.join(str(e).split())}")]


def verdict(checks: Iterable[Check]) -> str | None:
    """The run's one-line reason when a check failed (the first), else None."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return None
    more = f" (+{len(failed) - 1} more failed check(s): jobs show)" if len(failed) > 1 else ""
    return f"gate: {failed[0].detail}{more}"


# ---- what the stage logged ---------------------------------------------------------------------

def metrics(ctx) -> list[dict]:
    """Every row of the run's metrics.jsonl (all attempts), in the order written."""
    path = RunDir(ctx.run_dir).metrics
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def steps_trained(ctx, key: str, asked: int, what: str | None = None) -> Check:
    """`key` (a loss the loop logs at its last step, "pretrain/loss") was logged at step `asked`:
    the loop ran to the end the config asked for. `asked` 0 (rm's initialisation alone) needs none."""
    steps = [r["step"] for r in metrics(ctx) if key in r]
    last = max(steps, default=0)
    what = what or f"{key.split('/')[0]} step(s)"
    if asked == 0:
        return Check("steps", not steps, f"0 {what} asked for, {last} run" if steps else f"0 {what}, as asked")
    return Check("steps", last == asked, f"ran {last} of {asked} {what}")


def steps_with(ctx, key: str, total: int, what: str) -> Check:
    """At least one of the `total` steps logged `key`: a loop whose every step had nothing to train
    on (rl's groups that all tied) ran its steps and trained none."""
    trained = sum(1 for r in metrics(ctx) if key in r)
    return Check("trained", trained > 0, f"{what} in {trained} of {total} step(s)")


def losses_finite(ctx, key: str, name: str = "loss") -> Check:
    """Every logged value of `key` is a finite number (metrics.jsonl writes NaN and inf as null)."""
    rows = [r for r in metrics(ctx) if key in r]
    bad = next((r for r in rows if not _finite(r[key])), None)
    if bad is not None:
        return Check(name, False, f"{key} is not finite (NaN or inf) at step {bad['step']}")
    if not rows:   # nothing logged to judge (rm.steps=0); the steps check says whether that was asked for
        return Check(name, True, f"no {key} logged")
    return Check(name, True, f"{key} finite at all {len(rows)} logged step(s), last {rows[-1][key]:.4g}")


def summed(ctx, key: str) -> float:
    return sum(r[key] for r in metrics(ctx) if _finite(r.get(key)))


def positive(name: str, count: float, what: str) -> Check:
    return Check(name, count > 0, f"{int(count)} {what}")


# ---- what the outputs hold ---------------------------------------------------------------------

def lines(path: Path) -> int:
    """Rows of a .jsonl or .txt file (non-blank lines)."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def rows(path: Path, expected: int, source: str, allow_empty: bool = False) -> Check:
    """`path` has exactly the `expected` rows `source` ("data.n_sft") asks for and, unless
    `allow_empty`, at least one."""
    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        return Check("rows", False, f"{where} is missing")
    got = lines(path)
    if got != expected:
        return Check("rows", False, f"{where} has {got} row(s); {source} asks {expected}")
    if not got and not allow_empty:
        return Check("rows", False, f"{where} has no rows ({source} is empty)")
    return Check("rows", True, f"{where} has {got} row(s)")


def manifest_rows(folder: Path, counts: dict[str, str], need_rows: Iterable[str] = ()) -> list[Check]:
    """The rows of each file match what the folder's manifest.json says it wrote ({manifest key: file});
    the keys in `need_rows` must also be above 0."""
    manifest = json.loads((folder / "manifest.json").read_text())
    need = set(need_rows)
    return [rows(folder / name, int(manifest[key]), f"manifest.json {key}", allow_empty=key not in need)
            for key, name in counts.items()]


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    return sorted(folder.glob("*.safetensors"))


def model_loads(folder: Path, name: str = "model", whole: bool = True) -> Check:
    """The HF folder loads: its config.json, and its weights. With `whole` and under WHOLE_LOAD_BYTES,
    transformers loads the model and every tensor must be finite; otherwise the safetensors header of
    every shard the index names is read (no weight read, and no modelling code: a backend's model
    may need its own)."""
    config = json.loads((folder / "config.json").read_text())
    if not isinstance(config, dict):
        return Check("loads", False, f"{name}/config.json is not a JSON object")
    files = _weight_files(folder)
    missing = [f.name for f in files if not f.is_file()]
    if not files or missing:
        return Check("loads", False, f"{name} has no weights" + (f" ({', '.join(missing)} missing)" if missing else ""))
    if not whole or sum(f.stat().st_size for f in files) >= WHOLE_LOAD_BYTES:
        from safetensors import safe_open

        tensors = 0
        for f in files:
            with safe_open(f, framework="pt") as st:
                tensors += len(list(st.keys()))
        return Check("loads", tensors > 0, f"{name}: config and {tensors} tensor header(s) in {len(files)} file(s) read")
    import torch
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(folder, dtype="auto").state_dict()
    bad = next((n for n, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())), None)
    if bad is not None:
        return Check("loads", False, f"{name} loads, but its tensor {bad} is not finite")
    return Check("loads", bool(state), f"{name} loads: {len(state)} tensor(s), all finite")


def trained_model(ctx, produced: dict[str, Path], output: str, section: str, steps: int) -> list[Check]:
    """What the shared training loop (stages/ml/loop.py) leaves: `steps` steps run, every logged loss
    finite, and the output model loading."""
    key = f"{section}/loss"
    return [steps_trained(ctx, key, steps), losses_finite(ctx, key), model_loads(produced[output], output)]


def language_model(ctx, produced: dict[str, Path], section: str) -> list[Check]:
    """pretrain's and sft's gate, either backend: the shared loop's checks (trained_model) for `torch`;
    Megatron's run is judged by its exported model alone."""
    cfg = ctx.config[section]
    if cfg.get("backend", "torch") == "megatron":
        return [model_loads(produced["model"], "model", whole=False)]
    return trained_model(ctx, produced, "model", section, cfg["steps"])
