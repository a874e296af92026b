"""Sweeps here: the grid from Hydra's sweep grammar, a bad value refusing the whole sweep with the
store untouched, and a local sweep whose re-submit reuses every point, whose best point `compare`
marks, and whose best output a later stage takes as `SWEEP:best`."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from jobs.errors import RecipeError
from jobs.grid import grid, parse
from lineage import Store
from lineage import sweeps as records

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_the_grid_is_every_combination_in_hydras_grammar():
    axes = parse(["sft.lr=1e-3,3e-3", "sft.steps=range(2,8,2)", "+sft.note=choice(a,b)"])
    assert [(a.key, a.values) for a in axes] == [("sft.lr", ["0.001", "0.003"]), ("sft.steps", ["2", "4", "6"]),
                                                  ("+sft.note", ["a", "b"])]
    points = grid(axes)
    assert len(points) == 12 and len({json.dumps(p, sort_keys=True) for p in points}) == 12
    assert points[1] == {"sft.lr": "0.001", "sft.steps": "2", "+sft.note": "b"}   # the last axis varies fastest
    for bad, why in [("sft.lr=interval(0,1)", "interval"), ("sft.lr=1,1", "repeated"), ("~sft.lr", "deletes"),
                     ("sft.lr=(", "bad --sweep")]:
        with pytest.raises(RecipeError, match=why):
            parse([bad])
    with pytest.raises(RecipeError, match="given twice"):
        parse(["sft.lr=1,2", "sft.lr=3"])


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, dict, str]:
    """A store in which testchain's count stage ran as a local sweep over count.steps=3,1,2, two at a time."""
    env = {"JOBS_RECIPES": str(FIXTURES / "recipes"),
           "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    store = tmp_path_factory.mktemp("sweep") / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count", "--sweep", "count.steps=3,1,2", "count.step_s=0",
                 "--max-parallel", "2", env=env)
    assert r.code == 0, r.err
    sweep = r.out.split("sweep ", 1)[1].split(":")[0]
    said = [line.split("  ", 1)[1] for line in r.out.splitlines() if "  point " in line]   # each run's values
    assert said == ["point 0: count.steps=3", "point 1: count.steps=1", "point 2: count.steps=2"], r.out
    return store, env, sweep


def test_a_local_sweep_records_every_point_and_a_resubmit_reuses_them(swept):
    store, env, sweep = swept
    view = records.read(Store(store), sweep)
    runs = [Store(store).run(r) for r in view.runs]
    assert [r.state for r in runs] == ["SUCCEEDED"] * 3
    assert [r.spec["config"]["count"]["steps"] for r in runs] == [3, 1, 2]
    assert [r.spec["sweep"] for r in runs] == [{"id": sweep, "point": i, "values": {"count.steps": v}}
                                               for i, v in enumerate(["3", "1", "2"])]
    assert len({r.spec["code"]["snapshot"] for r in runs}) == 1   # the code was snapshot once for all points
    again = run_jobs(store, "submit", "testchain", "--stage", "count", "--sweep", "count.steps=3,1,2", "count.step_s=0",
                     env=env)
    assert again.code == 0, again.err
    assert f"sweep {sweep}: 3 point(s), 0 to run" in again.out and again.out.count(" reused: ") == 3
    assert len(Store(store).index().runs()) == 3


def test_compare_marks_the_best_point_and_a_later_stage_takes_its_output(swept):
    store, env, sweep = swept
    r = run_jobs(store, "compare", sweep[:8], env=env)
    assert r.code == 0, r.err
    rows = [line for line in r.out.splitlines() if line[:1] in ("*", " ") and line[3:8].strip().isdigit()]
    assert len(rows) == 3 and [line[0] for line in rows] == [" ", "*", " "]   # step, lower is better: 1 step
    best = Store(store).run(records.read(Store(store), sweep).runs[1])
    assert best.metrics["step"] == 1
    r = run_jobs(store, "submit", "testchain", "--stage", "double", "--input", f"numbers={sweep}:best[step]", env=env)
    assert r.code == 0, r.err
    s = Store(store)
    double = s.run(s.index().runs(stage="double")[0]["id"])
    assert double.inputs["numbers"] == best.outputs["result"] and double.state == "SUCCEEDED"
    shown = run_jobs(store, "show", best.id, env=env)
    assert f"sweep     {sweep} point 1 (count.steps=1)" in shown.out
    shown = run_jobs(store, "show", double.id, env=env)   # the input's line says which sweep and point made it
    (line,) = [x for x in shown.out.splitlines() if x.startswith("input     numbers ")]
    assert line.startswith(f"input     numbers    {best.outputs['result']}  (testchain/count/result:v")   # its name
    assert line.endswith(f"  (from sweep {sweep} point 1 (count.steps=1))"), line
    bad = run_jobs(store, "submit", "testchain", "--stage", "double", "--input", f"numbers={sweep}:best[nope]", env=env)
    assert bad.code == 2 and "no point recorded metric 'nope'" in bad.err
    status = run_jobs(store, "status", sweep, env=env)
    assert status.code == 0 and "3 points: 3 SUCCEEDED" in status.out
    points = json.loads(run_jobs(store, "status", sweep, "--json", env=env).out)   # one document, as everywhere
    assert [p["point"] for p in points] == [0, 1, 2] and {p["state"] for p in points} == {"SUCCEEDED"}
    grid = json.loads(run_jobs(store, "compare", sweep, "--json", env=env).out)
    assert [p["best"] for p in grid] == [False, True, False]
    report = run_jobs(store, "report", sweep, "-o", str(store.parent / "sweep.html"), env=env)
    assert report.code == 0, report.err
    assert "<svg" in (store.parent / "sweep.html").read_text()


def test_a_rate_is_plotted_on_a_log_axis():
    from jobs.sweep import log_axis

    assert log_axis("sft.lr", [1e-3, 3e-3]) and log_axis("rl.dpo.lr", [1e-4, 3e-4, 1e-3])
    assert log_axis("data.n_sft", [10, 1000]) and not log_axis("data.n_sft", [100, 200, 300])
    assert not log_axis("sft.lr", [0.0, 1e-3]) and not log_axis("sft.lr", [1e-3])


def test_a_bad_value_in_one_point_refuses_the_sweep_and_leaves_the_store_untouched(swept):
    store, env, _ = swept
    before = tree_digest(store)
    r = run_jobs(store, "submit", "tiny", "--stage", "data", "--sweep", "data.n_sft=100,-5", "--sweep", "seed=1,2")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("jobs: error: sweep point data.n_sft=-5 seed=1: tiny/data: data.n_sft must be")
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    for args in (["--sweep", "count.steps=1,2", "--stage", "count,double"],      # one stage only
                 ["--sweep", "count.steps=1,2", "--stage", "count", "count.steps=3"],  # swept and set
                 ["--max-parallel", "2", "--stage", "count"]):                   # a limit without a sweep
        r = run_jobs(store, "submit", "testchain", *args, env=env)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    assert tree_digest(store) == before


def test_a_slurm_sweeps_dry_run_shows_the_array_it_would_submit(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false}\n")
    env = {"JOBS_RECIPES": str(FIXTURES / "recipes"), "JOBS_PROFILES": str(profiles),
           "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "testchain", "--stage", "count", "--sweep", "count.steps=1,2,3", "--executor", "slurm",
                 "--profile", "dev", "--max-parallel", "2", "--dry-run", env=env)
    assert r.code == 0, r.err
    assert "#SBATCH --array=0-2%2" in r.out and r.out.count("#!/bin/bash") == 1, r.out
    assert f"#SBATCH --output='{store}/sweeps/<sweep>/%A_%a_0_log.out'" in r.out, r.out
    assert not store.exists()


def test_composing_a_stage_once_gives_each_point_the_config_composed_for_it():
    """A sweep composes its stage once and applies each point's values to that composition: the
    configs are those of composing every point on its own, interpolations (nano3's rl reads
    max_total_sequence_length in two more keys), nested keys, lists and added keys included."""
    from jobs import recipes

    nano3, tiny = recipes.load("nano3"), recipes.load("tiny")
    cases = [(nano3, "rl", ["seed=7"], [["rl.policy.max_total_sequence_length=512"],
                                        ["rl.policy.max_total_sequence_length=2048", "++rl.policy.extra=[1,[2,3],{a: 4}]"],
                                        []]),
             (tiny, "eval", [], [["eval.ks=[1,2]", "seed=3"], ["eval.ks=[8]", "+eval.note=x"], ["tracking.project=p"]])]
    for recipe, stage, shared, points in cases:
        once = recipes.compose_points(recipe, stage, shared, points)
        assert once == [recipes.compose(recipe, stage, [*shared, *point]) for point in points]
    (short, long, _) = recipes.compose_points(nano3, "rl", [], cases[0][3])
    assert short["rl"]["policy"]["generation"]["max_new_tokens"] == 512   # interpolated after the point's value
    assert long["rl"]["policy"]["generation"]["vllm_cfg"]["max_model_len"] == 2048
    assert long["rl"]["policy"]["extra"] == [1, [2, 3], {"a": 4}]
    for bad, why in [(["eval.kss=[1]"], "unknown config key eval.kss"), (["+eval.ks=[1]"], "already at 'eval.ks'")]:
        with pytest.raises(RecipeError, match=why):
            recipes.compose_points(tiny, "eval", [], [[], bad])


def test_a_run_a_sweep_and_a_reproduction_are_submitted_by_one_function(tmp_path, monkeypatch, capsys):
    """`jobs submit`, `jobs submit --sweep` and `jobs reproduce` all go down jobs.submit.submit: it is
    entered once per command, and every run record is written from inside it (the call stack at
    each Store.create_run says so)."""
    import sys

    from jobs import cli
    from jobs import submit as one_path

    monkeypatch.setenv("JOBS_RECIPES", str(FIXTURES / "recipes"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(FIXTURES))
    store = tmp_path / "store"
    path, writes = one_path.submit.__code__, Store.create_run.__code__
    entered, written, now = [], [], [None]

    def watch(frame, event, arg):
        if event != "call":
            return
        if frame.f_code is path:
            entered.append(now[0])
        elif frame.f_code is writes:
            f, inside = frame.f_back, False
            while f is not None and not inside:
                inside, f = f.f_code is path, f.f_back
            written.append((now[0], inside))

    def jobs(what: str, *args: str) -> None:
        now[0] = what
        sys.setprofile(watch)
        try:
            code = cli.main(["--store", str(store), *args])
        finally:
            sys.setprofile(None)
        assert code == 0, capsys.readouterr()

    jobs("run", "submit", "testchain", "--stage", "count", "count.steps=2", "count.step_s=0")
    jobs("sweep", "submit", "testchain", "--stage", "count", "--sweep", "count.steps=3,4", "count.step_s=0")
    (single,) = [r["id"] for r in Store(store).index().runs() if Store(store).run(r["id"]).spec.sweep is None]
    jobs("reproduce", "reproduce", single)
    assert entered == ["run", "sweep", "reproduce"]
    assert written == [("run", True), ("sweep", True), ("sweep", True), ("reproduce", True)]
