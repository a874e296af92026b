"""Inputs follow one chain, and results are where people look: through the real CLI on a store of
evalchain runs (count -> train -> evaluate; evaluate reads the trained model and count's result as
its data, like tiny's eval reads data.eval), each a real local job of well under a second.

The store: chain A (count v1 -> train -> evaluate), then count again with another config (v2, the
newest), then evaluate by default (must take v1, its model's data), then train on v2 and evaluate by
default (follows v2), then evaluate that model with --input data=…:v1 (mixing: warned).
"""
import json
import os
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
ENV = {"JOBS_RECIPES": str(FIXTURES / "recipes"),
       "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def jobs(store: Path, *args: str):
    return run_jobs(store, *args, env=ENV)


def ok(store: Path, *args: str):
    r = jobs(store, *args)
    assert r.code == 0, r.out + r.err
    return r


def newest(store: Path, stage: str) -> dict:
    return Store(store).index().runs(recipe="evalchain", stage=stage, limit=1)[0]


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("chains") / "store"
    steps = {}
    ok(root, "submit", "evalchain", "--stage", "all", "train.steps=20")
    steps["eval_a"] = newest(root, "evaluate")["id"]
    ok(root, "submit", "evalchain", "--stage", "count", "count.steps=4")          # v2: newest data, another chain
    steps["default"] = jobs(root, "submit", "evalchain", "--stage", "evaluate", "--force")
    steps["eval_default"] = newest(root, "evaluate")["id"]
    ok(root, "submit", "evalchain", "--stage", "train", "train.steps=30")          # a model of chain v2
    steps["follow"] = jobs(root, "submit", "evalchain", "--stage", "evaluate")
    steps["eval_b"] = newest(root, "evaluate")["id"]
    steps["mixed"] = jobs(root, "submit", "evalchain", "--stage", "evaluate", "--input", "data=evalchain/count/result:v1")
    steps["eval_mixed"] = newest(root, "evaluate")["id"]
    steps["root"] = root
    return steps


def test_default_eval_data_follows_the_models_chain(chain):
    store = Store(chain["root"])
    v1 = store.resolve_artifact("evalchain/count/result:v1")
    v2 = store.resolve_artifact("evalchain/count/result:v2")
    assert v1 != v2 and store.resolve_artifact("evalchain/count/result:latest") == v2
    r = chain["default"]
    assert r.code == 0, r.err
    # The model is chain A's: its data is v1, not the newer v2, and the user is told in one line.
    assert store.run(chain["eval_default"]).inputs["data"] == v1
    notes = [line for line in r.err.splitlines() if line.startswith("jobs: note:")]
    assert len(notes) == 1 and "input data = evalchain/count/result:v1" in notes[0] and ":v2" in notes[0], r.err
    assert "warning" not in r.err
    # Once the newest model is of chain v2, the default follows it there, silently.
    r = chain["follow"]
    assert r.code == 0 and "jobs:" not in r.err, r.err
    assert store.run(chain["eval_b"]).inputs["data"] == v2


def test_mixing_chains_takes_an_explicit_input_and_is_warned_in_one_line(chain):
    store = Store(chain["root"])
    r = chain["mixed"]
    assert r.code == 0, r.err
    assert store.run(chain["eval_mixed"]).inputs["data"] == store.resolve_artifact("evalchain/count/result:v1")
    warned = [line for line in r.err.splitlines() if "mix" in line]
    assert len(warned) == 1, r.err
    line = warned[0]
    assert line.startswith("jobs: warning: evaluate's inputs mix chains:")
    count_a, count_b = (store.run(store.artifact(store.resolve_artifact(f"evalchain/count/result:v{v}"))["producer"]).id
                        for v in (1, 2))
    # both sides: the given data and the run it comes from, the model and the run it descends from
    assert "data evalchain/count/result:v1" in line and count_a[:13] in line
    assert "model evalchain/train/model:v2" in line and count_b[:13] in line


def test_lineage_labels_each_artifact_with_its_own_version(chain):
    """The count stage with the first config again makes v1's bytes, which adds v3: pictures keep v1."""
    root = chain["root"]
    r = ok(root, "submit", "evalchain", "--stage", "count", "count.steps=3", "--force")
    store = Store(root)
    assert store.resolve_artifact("evalchain/count/result:v3") == store.resolve_artifact("evalchain/count/result:v1")
    text = ok(root, "lineage", "evalchain/train/model:v1").out
    assert "evalchain/count/result:v1" in text and ":v3" not in text, text
    assert r.code == 0


def test_metrics_in_json(chain):
    root = chain["root"]
    store = Store(root)
    doc = json.loads(ok(root, "show", chain["eval_a"], "--json").out)
    assert doc["metrics"] == {"eval/exact_match": 0.75, "eval/pass@1": 0.6875} == store.run(chain["eval_a"]).metrics
    assert doc["duration_s"] > 0 and doc["ended"] >= doc["attempts"][-1]["start"]
    rows = json.loads(ok(root, "list", "--json").out)
    trains = {r["id"]: r for r in rows if r["stage"] == "train"}
    losses = sorted(round(r["metrics"]["train/loss"], 4) for r in trains.values())
    assert len(losses) == 2 and losses[0] < losses[1]     # 30 steps end lower than 20 on the made-up curve
    assert all(r["duration_s"] is not None for r in rows)


def test_list_shows_duration_and_a_chosen_metric(chain):
    root = chain["root"]
    out = ok(root, "list", "--stage", "train", "--metric", "train/loss").out.splitlines()
    assert out[0].split()[-2:] == ["TOOK", "train/loss"]
    values = sorted(float(line.split()[-1]) for line in out[1:])
    assert len(values) == 2 and values[0] < values[1]
    bad = jobs(root, "list", "--metric", "train/los")
    assert bad.code == 2 and bad.out == ""
    assert bad.err.count("\n") == 1 and "did you mean train/loss?" in bad.err, bad.err


def test_diff_shows_metric_deltas_and_exits_1_when_runs_differ(chain):
    root = chain["root"]
    a, b = (r["id"] for r in json.loads(ok(root, "list", "--stage", "train", "--json").out))
    r = jobs(root, "diff", b, a)
    assert r.code == 1, r.err
    store = Store(root)
    la, lb = store.run(b).metrics["train/loss"], store.run(a).metrics["train/loss"]
    assert f"metric  train/loss: {la:.4g} -> {lb:.4g} ({lb - la:+.4g})" in r.out.splitlines(), r.out
    assert "config  train.steps: 20 -> 30" in r.out
    same = jobs(root, "diff", a, a)
    assert same.code == 0 and same.out.startswith("no differences"), same.out


def test_compare_prints_the_configs_that_differ_and_their_metrics(chain):
    root = chain["root"]
    out = ok(root, "compare", "evalchain", "--stage", "train").out.splitlines()
    assert out[0] == "## evalchain/train: 2 run(s)"
    head = out[1].split()
    assert head[:4] == ["RUN", "STATE", "TOOK", "train.steps"] and "train/loss" in head and "count.steps" not in head
    rows = {line.split()[3]: line.split() for line in out[2:4]}
    assert set(rows) == {"20", "30"}
    # The evals differ in their inputs only: each input is a column, named by its own version.
    doc = json.loads(ok(root, "compare", chain["eval_default"], chain["eval_b"], "--json").out)
    t = doc["evalchain/evaluate"]
    assert t["keys"] == [] and t["inputs"] == ["data", "model"]
    assert [r["input_names"]["data"] for r in t["runs"]] == ["evalchain/count/result:v1", "evalchain/count/result:v2"]
    assert all(r["metrics"]["eval/exact_match"] == 0.75 for r in t["runs"])
    one = jobs(root, "compare", chain["eval_a"])
    assert one.code == 2 and "two or more runs" in one.err


def test_report_of_a_recipe_shows_one_consistent_chain_and_names_eval_data(chain, tmp_path):
    """The newest evaluate mixes chains: the report takes the newest consistent one and says which runs."""
    import re

    pytest.importorskip("matplotlib")
    root = chain["root"]
    store = Store(root)
    page = tmp_path / "r.html"
    ok(root, "report", "evalchain", "--out", str(page))
    text = page.read_text()
    note = re.sub(r"<[^>]+>", "", text[text.index('class="chain"'):text.index("</p>", text.index('class="chain"'))])
    b = store.run(chain["eval_b"])
    train = store.artifact(b.inputs["model"])["producer"]
    count = store.artifact(b.inputs["data"])["producer"]
    assert f"evaluate {chain['eval_b'][:13]}" in note and f"train {train[:13]}" in note and f"count {count[:13]}" in note
    assert chain["eval_mixed"][:13] not in text
    evals = text[text.index('id="eval"'):]
    evals = evals[:evals.index("</table>")]
    assert "<th>data</th>" in evals and "evalchain/count/result:v2" in evals and "result:v1" not in evals


def test_speeds_and_times_are_shown_but_do_not_make_runs_differ():
    from jobs.metrics import deltas

    same_work = deltas({"sft/loss": 0.5, "sft/tokens_per_s": 900.0, "tracking/wandb_init_s": 0.2},
                       {"sft/loss": 0.5, "sft/tokens_per_s": 1200.0, "tracking/wandb_init_s": 0.3})
    assert [counted for _, counted in same_work] == [False, False]
    assert same_work[0][0] == "metric  sft/tokens_per_s: 900 -> 1200 (+300)  (timing: not counted)"
    moved = deltas({"sft/loss": 0.5}, {"sft/loss": 0.25, "eval/exact_match": 0.75})
    assert moved == [("metric  eval/exact_match: <none> -> 0.75", True), ("metric  sft/loss: 0.5 -> 0.25 (-0.25)", True)]


def _strict(text: str):
    """`json.loads` that refuses NaN and Infinity, as jq and every other language's parser do."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_every_json_output_is_one_strict_document_and_jsonl_a_line_per_row(chain):
    root = chain["root"]
    store = Store(root)
    run, art = chain["eval_a"], store.run(chain["eval_a"]).outputs["report"]
    one = {("list",): list, ("list", "--stage", "train"): list, ("artifacts",): list, ("status",): list,
           ("status", "--all"): list, ("status", run): list, ("show", run): dict, ("show", art): dict,
           ("compare", "evalchain"): dict, ("compare", chain["eval_default"], chain["eval_b"]): dict,
           ("lineage", run): dict, ("lineage", art): dict}
    for args, shape in one.items():
        doc = _strict(ok(root, *args, "--json").out)   # the whole output: one document
        assert isinstance(doc, shape) and (bool(doc) or args == ("status",)), args   # status: [] (nothing runs)
    assert _strict(ok(root, "lineage", run, "--format", "json").out) == _strict(ok(root, "lineage", run, "--json").out)
    assert set(_strict(ok(root, "lineage", run, "--json").out)["outputs"]) == {"report"}
    for args in (("list",), ("artifacts",), ("status", "--all")):
        lines = ok(root, *args, "--jsonl").out.splitlines()
        assert [_strict(x) for x in lines] == _strict(ok(root, *args, "--json").out) and len(lines) > 1, args
    assert ok(root, "status", "--jsonl").out == ""     # nothing running: no line at all
    assert ok(root, "status").out.startswith("no runs queued or running in ")
    limit = jobs(root, "compare", "evalchain", "--limit", "-5")
    assert limit.code == 2 and limit.err == "jobs: error: --limit must be at least 1 (got -5)\n"


def test_a_metric_that_overflowed_is_stored_and_printed_as_null(tmp_path):
    root = tmp_path / "store"
    ok(root, "submit", "evalchain", "--stage", "count,train", "train.steps=3", "+train.diverge=true")
    store = Store(root)
    run = store.index().runs(stage="train")[0]["id"]
    for path in [*root.joinpath("records").rglob("*.json"), store.run_dir(run) / "metrics.jsonl"]:
        for line in path.read_text().splitlines():
            _strict(line)
    assert store.run(run).metrics["train/loss"] is None and store.run(run).metrics["train/reward"] is None
    shown = _strict(ok(root, "show", run, "--json").out)
    assert shown["metrics"]["train/loss"] is None and isinstance(shown["metrics"]["train/lr"], float)
    listed = {r["id"]: r for r in _strict(ok(root, "list", "--json").out)}
    assert listed[run]["metrics"]["train/reward"] is None
    other = store.index().runs(stage="count")[0]["id"]
    compared = _strict(ok(root, "compare", run, other, "--json").out)
    assert compared["evalchain/train"]["runs"][0]["metrics"]["train/loss"] is None
