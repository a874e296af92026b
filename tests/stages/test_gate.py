"""The results gate (stages/gate.py, run by runtime/entry.py): a stage that returned its folders but
did nothing worth keeping ends FAILED with the gate's one line, and none of its outputs becomes an
artifact or moves a name. Real runs of the real stages through the CLI, each a few steps long."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import latest, run_jobs
from lineage import Store
from lineage.errors import LineageError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "nano3_sources"))
import make  # noqa: E402

QUIET = ["tracking.wandb=disabled"]
# A model small enough that a few steps take seconds.
SMALL = ["pretrain.model.layers=1", "pretrain.model.hidden=64", "pretrain.model.heads=2",
         "pretrain.model.intermediate=128", "pretrain.batch_size=4", "pretrain.log_every=1"]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A store with a small data set and a model pretrained on it for 2 steps: both runs pass the gate."""
    root = tmp_path_factory.mktemp("gate") / "store"
    r = run_jobs(root, "submit", "tiny", "--stage", "data", *QUIET, "data.n_corpus_lines=400", "data.n_sft=64",
                 "data.n_prefs=64", "data.n_rl=64", "data.n_eval=16", "data.n_dev=16", "data.n_rl_val=4")
    assert r.code == 0, r.out + r.err
    r = run_jobs(root, "submit", "tiny", "--stage", "pretrain", *QUIET, *SMALL, "pretrain.steps=2")
    assert r.code == 0, r.out + r.err
    (root.parent / "model").write_text(latest(Store(root), "pretrain").outputs["model"])
    return root


def model(root: Path) -> str:
    """The fixture's pretrained model, by ID: a test does not follow a name another test may move."""
    return (root.parent / "model").read_text()


def failed_by_gate(root: Path, r, stage: str) -> tuple[str, list[str]]:
    """The run `r` (a submit's result) failed in the gate: its one-line reason and the FAIL lines
    `jobs show` prints; nothing it produced is an artifact."""
    assert r.code != 0, r.out + r.err
    store = Store(root)
    row = next(iter(store.index().runs(stage=stage)))
    view = store.run(row["id"])
    assert view.state == "FAILED" and view.reason.startswith("gate: ") and "\n" not in view.reason, view.reason
    assert f"FAILED: {view.reason}" in r.out, r.out
    assert view.outputs == {}
    assert [a.get("failure_class") for a in view.attempts] == ["gate"], view.attempts   # lineage/failures.py's class
    assert [a["id"] for a in store.index().artifacts() if a["producer"] == view.id] == []
    shown = run_jobs(root, "show", view.id)
    assert shown.code == 0, shown.err
    gate = [line for line in shown.out.splitlines() if line.startswith("gate ")]
    assert gate and all(re.match(r"gate {6}(pass|FAIL)  \S+ +\S", line) for line in gate), shown.out
    assert "class gate" in shown.out, shown.out
    return view.reason, [line for line in gate if " FAIL " in line]


def test_a_normal_run_passes_the_gate_and_jobs_show_prints_its_checks(small):
    store = Store(small)
    pretrain, data = store.run(store.artifact(model(small))["producer"]), latest(store, "data")
    r = run_jobs(small, "show", pretrain.id)
    assert r.code == 0, r.err
    gate = [line.split() for line in r.out.splitlines() if line.startswith("gate ")]
    assert [(g[1], g[2]) for g in gate] == [("pass", "steps"), ("pass", "loss"), ("pass", "loads")], r.out
    assert "ran 2 of 2 pretrain step(s)" in r.out and "model loads:" in r.out
    doc = json.loads(run_jobs(small, "show", pretrain.id, "--json").out)
    assert [c["name"] for c in doc["gate"]] == ["steps", "loss", "loads"] and all(c["ok"] for c in doc["gate"])
    # The data stage: every split has the rows its config asked for.
    r = run_jobs(small, "show", data.id)
    assert "gate      pass  rows     sft/train.jsonl has 64 row(s)" in r.out, r.out
    assert "gate      pass  rows     eval/test.jsonl has 16 row(s)" in r.out
    assert " FAIL " not in r.out


def test_a_loss_that_went_nan_fails_the_gate_and_registers_nothing(small):
    """Weight decay so large the first update overflows the weights: every later loss is NaN, and
    the stage, which trains to the end and saves, used to end SUCCEEDED with a NaN model."""
    store = Store(small)
    before = store.resolve_artifact("tiny/pretrain/model:latest")
    r = run_jobs(small, "submit", "tiny", "--stage", "pretrain", *QUIET, *SMALL, "pretrain.steps=3",
                 "pretrain.lr=1", "pretrain.weight_decay=1e40")
    reason, failed = failed_by_gate(small, r, "pretrain")
    assert re.fullmatch(r"gate: pretrain/loss is not finite \(NaN or inf\) at step \d( \(\+1 more failed check\(s\): jobs show\))?",
                        reason), reason
    assert any(" loss " in line for line in failed) and any("is not finite" in line for line in failed if " loads " in line)
    assert Store(small).resolve_artifact("tiny/pretrain/model:latest") == before


def test_rl_whose_groups_all_tied_trained_nothing_and_fails_the_gate(small):
    """One new token can never spell a two-digit sum: every rollout scores 0, every group ties, and
    dynamic sampling trains on none. The stage ran its steps and saved the untouched policy."""
    from stages.ml import batches

    prompts = Path(Store(small).artifact(Store(small).resolve_artifact("tiny/data/rl:latest"))["path"])
    rows = [json.loads(line) for line in (prompts / "train.jsonl").read_text().splitlines()]
    picked = [rows[i] for step in range(2) for i in batches.indices(1234, step, len(rows), 2)]
    assert all(len(p["answer"]) >= 2 for p in picked), picked   # so that no 1-token answer is right
    r = run_jobs(small, "submit", "tiny", "--stage", "rl", *QUIET, "--input", f"policy={model(small)}",
                 "rl.cluster.actors=local", "rl.grpo.max_num_steps=2", "rl.grpo.num_prompts_per_step=2",
                 "rl.grpo.num_generations_per_prompt=2", "rl.grpo.max_val_samples=2",
                 "rl.generation.max_new_tokens=1")
    reason, failed = failed_by_gate(small, r, "rl")
    assert reason == "gate: the policy trained in 0 of 2 step(s)", reason
    assert [line.split()[2] for line in failed] == ["trained"]
    with pytest.raises(LineageError):
        Store(small).resolve_artifact("tiny/rl/model:latest")


def test_eval_on_an_empty_set_fails_the_gate(small, tmp_path):
    """prep_rl with no benchmark and no held-out prompt writes an empty eval set; eval on it scored
    nothing and generated nothing (it crashed in the tokenizer before)."""
    src = tmp_path / "sources"
    make.make(src)
    r = run_jobs(small, "submit", "nano3", "--stage", "prep_rl", *QUIET,
                 f"prep_rl.sources=[{{name: math, path: '{src}/rl/math', env_map: {{math_with_judge_simple_agent: math}}}}]",
                 "prep_rl.eval.sources=[]", "prep_rl.eval.held_out=0", "prep_rl.valid_size=8",
                 "prep_rl.decontaminate.ngram=8")
    assert r.code == 0, r.out + r.err
    r = run_jobs(small, "submit", "tiny", "--stage", "eval", *QUIET, "--input", "data=nano3/prep_rl/eval:latest",
                 "--input", f"model={model(small)}", "eval.n_samples=2", "eval.ks=[1,2]")
    reason, failed = failed_by_gate(small, r, "eval")
    assert reason.startswith("gate: report/samples.jsonl has no rows (the eval set is empty)"), reason
    assert [line.split()[2] for line in failed] == ["rows", "tokens"], failed
    assert "0 token(s) generated" in failed[1]
    with pytest.raises(LineageError):
        Store(small).resolve_artifact("tiny/eval/report:latest")
