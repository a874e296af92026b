"""Run cache, reproduce, diff, verify, gc and pin, end to end through the CLI on the test stages."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def env() -> dict:
    return {"JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def runs(store: Path) -> list[str]:
    return [r["id"] for r in Store(store).index().runs()]


def test_identical_submission_reuses_the_run_and_force_reruns(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count,double", env=env).code == 0
    again = run_jobs(store, "submit", "testchain", "--stage", "count,double", env=env)
    assert again.code == 0 and again.out.count("reused: an identical run already succeeded") == 2
    assert len(runs(store)) == 2
    changed = run_jobs(store, "submit", "testchain", "--stage", "count,double", "double.fail=false", "count.steps=4", env=env)
    assert "reused" not in changed.out and len(runs(store)) == 4
    forced = run_jobs(store, "submit", "testchain", "--stage", "count", "--force", env=env)
    assert "reused" not in forced.out and len(runs(store)) == 5


def test_corrupt_outputs_are_not_reused_and_verify_reports_them(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count", env=env).code == 0
    s = Store(store)
    (run,) = runs(store)
    art = s.run(run).outputs["result"]
    f = Path(s.artifact(art)["path"]) / "result.json"
    os.chmod(f, 0o644)
    f.write_text('{"steps": 999}')
    v = run_jobs(store, "verify", art[:12])
    assert v.code == 1 and "CORRUPT" in v.out and "changed result.json" in v.out
    assert run_jobs(store, "verify", "--all").code == 1
    again = run_jobs(store, "submit", "testchain", "--stage", "count", env=env)
    assert "reused" not in again.out and len(runs(store)) == 2


def test_reproduce_from_another_directory_after_the_code_moved_on(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count", "count.steps=7", env=env).code == 0
    (run,) = runs(store)
    # A later checkout: the recorded snapshot, not today's code, must run.
    other = tmp_path / "elsewhere"
    other.mkdir()
    p = subprocess.run([str(Path(os.sys.executable).parent / "jobs"), "--store", str(store), "reproduce", run[:13]],
                       capture_output=True, text=True, cwd=other, env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    assert "reproduced bit for bit" in p.stdout
    s = Store(store)
    new = [r for r in runs(store) if r != run][0]
    assert s.run(new).spec["reproduces"] == run
    assert s.run(new).spec["code"]["root"] == s.artifact(s.run(run).spec["code"]["snapshot"])["path"]


def test_reproduce_leaves_latest_where_it_was(tmp_path, env):
    """A reproduction checks a run and moves no name: its outputs get no new version, and a version
    that a reproduction by earlier code added is passed over by `:latest`."""
    from lineage import refs

    store = tmp_path / "s"
    for steps in (7, 8):   # v1, then v2: the newest, the default input of every later stage
        assert run_jobs(store, "submit", "testchain", "--stage", "count", f"count.steps={steps}", env=env).code == 0
    s = Store(store)
    first = s.index().runs(stage="count")[-1]["id"]
    old, new = s.run(first).outputs["result"], s.resolve_artifact("testchain/count/result:latest")
    assert old != new and refs.versions(s.refs, "testchain/count/result") == [1, 2]
    r = run_jobs(store, "reproduce", first, env=env)
    assert r.code == 0 and "reproduced bit for bit" in r.out, r.out + r.err
    assert refs.versions(s.refs, "testchain/count/result") == [1, 2]
    shown = json.loads(run_jobs(store, "show", "testchain/count/result:latest", "--json").out)
    assert shown["id"] == new
    # What earlier code did: the reproduction added v3 = v1's artifact. `:latest` steps back over it.
    (again,) = [x for x in runs(store) if Store(store).run(x).spec.reproduces == first]
    assert refs.add(s.refs, "testchain/count/result", old, again) == 3
    assert s.resolve_artifact("testchain/count/result:latest") == new
    assert s.resolve_artifact("testchain/count/result:v3") == old
    from lineage.gc import kept

    assert kept(s)[new] == "testchain/count/result:latest"     # gc keeps what :latest resolves to


def test_reproduce_refuses_environment_drift_unless_allowed(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count", env=env).code == 0
    (run,) = runs(store)
    # Edit the recorded environment the way another machine would differ: rewrite the record's packages.
    s = Store(store)
    path = next((s.records / "run").rglob(f"{run}.json"))
    spec = json.loads(path.read_text())
    spec["environment"]["packages"]["torch"] = "0.0.1"
    os.chmod(path, 0o644)
    path.write_text(json.dumps(spec))
    before = tree_digest(store)
    r = run_jobs(store, "reproduce", run, env=env)
    assert r.code == 2 and "environment differs" in r.err and "torch 0.0.1 ->" in r.err
    assert len(r.err.strip().splitlines()) == 1 and tree_digest(store) == before   # one line, nothing recorded
    ok = run_jobs(store, "reproduce", run, "--allow-env-drift", env=env)
    assert ok.code == 0 and "drift (allowed)" in ok.out and "reproduced bit for bit" in ok.out
    new = [r for r in runs(store) if r != run][0]
    drift = Store(store).run(new).spec["env_drift"]
    assert list(drift) == ["python"] and any(c.startswith("torch 0.0.1 -> ") for c in drift["python"]["changes"])
    shown = run_jobs(store, "show", new).out
    assert f"reproduces {run}" in shown and "drift     python: recorded" in shown and "torch 0.0.1 -> " in shown


def test_diff_names_config_input_and_output_differences(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count", "count.steps=2", env=env).code == 0
    assert run_jobs(store, "submit", "testchain", "--stage", "count", "count.steps=3", env=env).code == 0
    b, a = runs(store)
    d = run_jobs(store, "diff", a, b)
    assert d.code == 1 and "config  count.steps: 2 -> 3" in d.out and "output  result:" in d.out
    same = run_jobs(store, "diff", a, a)
    assert same.code == 0 and "no differences" in same.out


def test_gc_keeps_what_is_kept_and_deletes_the_rest(tmp_path, env):
    store = tmp_path / "s"
    for steps in (2, 3, 4):
        assert run_jobs(store, "submit", "testchain", "--stage", "count", f"count.steps={steps}", env=env).code == 0
    s = Store(store)
    newest, middle, oldest = runs(store)
    old_art = s.run(oldest).outputs["result"]
    mid_art = s.run(middle).outputs["result"]
    assert run_jobs(store, "pin", middle).code == 0
    old_path = Path(s.artifact(old_art)["path"])
    dry = run_jobs(store, "gc", "--older-than", "0")
    assert dry.code == 0 and old_art[:20] in dry.out and mid_art[:20] not in dry.out
    assert Path(s.artifact(old_art)["path"]).exists()            # a dry run deletes nothing
    wet = run_jobs(store, "gc", "--older-than", "0", "--yes")
    assert wet.code == 0 and "deleted 1 artifact" in wet.out
    assert not old_path.exists()
    assert run_jobs(store, "show", old_art).code == 2
    assert run_jobs(store, "verify", "--all").code == 0          # what remains is whole
    assert run_jobs(store, "gc", "--older-than", "30").out.startswith("0 artifact")


@pytest.mark.slow
def test_a_tiny_training_stage_reproduces_bit_for_bit(data_store, tmp_path):
    store = tmp_path / "s"
    shutil.copytree(data_store, store)
    small = ["pretrain.steps=20", "pretrain.log_every=5", "pretrain.warmup=5", "tracking.wandb=disabled",
             "tracking.tensorboard=false"]
    assert run_jobs(store, "submit", "tiny", "--stage", "pretrain", *small).code == 0
    run = Store(store).index().runs(stage="pretrain")[0]["id"]
    r = run_jobs(store, "reproduce", run)
    assert r.code == 0, r.out + r.err
    assert "reproduced bit for bit" in r.out
    s = Store(store)
    new = s.index().runs(stage="pretrain")[0]["id"]
    assert new != run and s.run(new).outputs["model"] == s.run(run).outputs["model"]


@pytest.mark.slow
def test_gc_keeps_the_top_k_training_snapshots_by_a_metric(data_store, tmp_path):
    store = tmp_path / "s"
    shutil.copytree(data_store, store)
    small = ["pretrain.steps=40", "pretrain.log_every=5", "pretrain.checkpoint_every=10", "pretrain.warmup=5",
             "tracking.wandb=disabled", "tracking.tensorboard=false"]
    assert run_jobs(store, "submit", "tiny", "--stage", "pretrain", *small).code == 0
    run = Store(store).index().runs(stage="pretrain")[0]["id"]
    keep = Store(store).run_dir(run) / "checkpoints" / "keep"
    snaps = {p.stem: json.loads(p.read_text())["metrics"]["pretrain/loss"] for p in keep.glob("*.json")}
    assert sorted(snaps) == ["pretrain-step0000010", "pretrain-step0000020", "pretrain-step0000030"]
    best = min(snaps, key=snaps.get)
    dry = run_jobs(store, "gc", "--keep-top-k", "1", "--metric", "pretrain/loss")
    assert dry.code == 0 and "2 snapshot(s) beyond the best 1" in dry.out and len(list(keep.glob("*.pt"))) == 3
    assert run_jobs(store, "gc", "--keep-top-k", "1", "--metric", "pretrain/loss", "--yes").code == 0
    assert [p.stem for p in keep.glob("*.pt")] == [best]
    assert run_jobs(store, "gc", "--keep-top-k", "1").code == 2


def test_cancel_a_running_local_run(tmp_path, env):
    import time

    store = tmp_path / "s"
    p = subprocess.Popen([str(Path(os.sys.executable).parent / "jobs"), "--store", str(store), "submit", "testchain",
                          "--stage", "count", "count.steps=300", "count.step_s=0.1"],
                         env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(store.glob("runs/*/checkpoints/state.json")):
        assert time.monotonic() < deadline, "the local run never started"
        time.sleep(0.2)
    (run,) = runs(store)
    r = run_jobs(store, "cancel", run[:13])
    assert r.code == 0 and "SIGKILL to pid" in r.out
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1 and "CANCELLED" in out
    view = Store(store).run(run)
    assert view.state == "CANCELLED" and view.reason == "cancelled by user"
    assert run_jobs(store, "cancel", run).code == 2          # already ended: one line, exit 2
