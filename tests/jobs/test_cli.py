"""The `jobs` command end to end on the tiny data stage, and every bad input it must refuse."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store


def test_data_stage_end_to_end(data_store):
    listing = run_jobs(data_store, "list")
    assert listing.code == 0 and "SUCCEEDED" in listing.out and " data " in listing.out
    arts = run_jobs(data_store, "artifacts", "--recipe", "tiny")
    kinds = {line.split()[1] for line in arts.out.splitlines()[1:]}
    assert kinds == {"corpus", "sft-data", "pref-data", "rl-prompts", "eval-data", "tokenizer"}

    store = Store(data_store)
    idx = store.index()
    (run,) = idx.runs()
    view = store.run(run["id"])
    assert view.spec["config"]["data"]["seed"] == 1234
    assert view.spec["environment"]["digest"].startswith("sha256:")
    assert "git_sha" in view.spec["code"] and view.attempts[0]["exit"] == 0
    assert view.metrics["n_eval"] == 500

    # Held-out pairs never appear in a training split.
    def prompts(role: str, name: str) -> set[str]:
        path = Path(store.artifact(view.outputs[role])["path"]) / name
        return {json.loads(line)["prompt"] for line in path.read_text().splitlines()}
    held_out = prompts("eval", "test.jsonl")
    assert len(held_out) == 500
    assert not held_out & (prompts("sft", "train.jsonl") | prompts("rl", "train.jsonl") | prompts("prefs", "train.jsonl"))
    for line in (Path(store.artifact(view.outputs["prefs"])["path"]) / "train.jsonl").read_text().splitlines()[:200]:
        row = json.loads(line)
        a, b = map(int, row["prompt"][:-1].split("+"))
        if row["kind"] == "style":   # the right sum in the house style vs the bare one SFT learned
            assert row["chosen"] == f" {a + b}" and row["rejected"] == str(a + b)
        else:
            assert row["kind"] == "sum" and row["chosen"] == str(a + b) != row["rejected"]

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(store.artifact(view.outputs["tokenizer"])["path"])
    ids = tok("23+45=68")["input_ids"]
    assert len(ids) == 8 and tok.decode(ids) == "23+45=68"

    shown = run_jobs(data_store, "show", run["id"][:13])
    assert shown.code == 0 and "SUCCEEDED" in shown.out and view.outputs["sft"] in shown.out
    art = run_jobs(data_store, "show", "tiny/data/sft:latest")
    assert art.code == 0 and "train.jsonl" in art.out and "sft-data" in art.out
    for fmt, marker in (("text", "ancestry:"), ("mermaid", "graph LR"), ("dot", "digraph lineage")):
        out = run_jobs(data_store, "lineage", view.outputs["sft"][:12], "--format", fmt)
        assert out.code == 0 and marker in out.out and "tiny/data" in out.out


def test_same_seed_same_artifacts_other_seed_other_artifacts(data_store, tmp_path):
    again = tmp_path / "again"
    assert run_jobs(again, "submit", "tiny", "--stage", "data").code == 0
    reseeded = run_jobs(again, "submit", "tiny", "--stage", "data", "seed=7")
    assert reseeded.code == 0
    def data_artifacts(root: Path) -> set[str]:
        return {a["id"] for a in Store(root).index().artifacts(recipe="tiny")}
    # Five datasets change with the seed; the character tokenizer does not, so it is one artifact.
    assert len(data_artifacts(again)) == 11
    assert len(Store(again).index().artifacts(kind="tokenizer")) == 1
    assert data_artifacts(data_store) <= data_artifacts(again)


def test_overrides_use_hydra_grammar(tmp_path):
    store = tmp_path / "s"
    r = run_jobs(store, "submit", "tiny", "--stage", "data", "data.n_sft=100", "+data.note='$(touch /tmp/owned-by-test)'",
                 "~tracking.tensorboard")
    assert r.code == 0, r.err
    s = Store(store)
    view = s.run(s.index().runs()[0]["id"])
    assert view.spec["config"]["data"]["note"] == "$(touch /tmp/owned-by-test)"
    assert "tensorboard" not in view.spec["config"]["tracking"]
    sft = Path(s.artifact(view.outputs["sft"])["path"]) / "train.jsonl"
    assert len(sft.read_text().splitlines()) == 100
    assert not Path("/tmp/owned-by-test").exists()


def test_recipes_lists_recipes_and_stages(tmp_path):
    r = run_jobs(tmp_path / "s", "recipes")
    assert r.code == 0 and "tiny" in r.out and "nano3" in r.out and "data" in r.out


def test_help_is_fast_path_and_lists_commands(tmp_path):
    r = run_jobs(tmp_path / "s", "--help")
    for cmd in ("submit", "list", "show", "artifacts", "lineage", "index", "recipes"):
        assert cmd in r.out
    probe = subprocess.run(
        ["python", "-c", "import sys, jobs.cli; jobs.cli.build_parser();"
         "print(sorted(m for m in ('torch','ray','transformers','submitit','hydra','wandb') if m in sys.modules))"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert probe.stdout.strip() == "[]", probe.stderr


def test_index_rebuild_command(data_store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(data_store, copy)
    before = Store(copy).index().dump()
    r = run_jobs(copy, "index", "--rebuild")
    assert r.code == 0 and "rebuilt" in r.out
    assert Store(copy).index().dump() == before


BAD = [
    (["submit", "nosuch", "--stage", "data"], "unknown recipe 'nosuch'"),
    (["submit", "tiny", "--stage", "nosuch"], "has no stage 'nosuch'"),
    (["submit", "tiny", "--stage", "data", "data.n_sft=[1,2"], "malformed override"),
    (["submit", "tiny", "--stage", "data", "data.nosuch=1"], "nosuch"),
    (["submit", "tiny", "--stage", "data", "--input", "corpus=art_deadbeef"], "no selected stage takes that input"),
    (["submit", "tiny", "--stage", "data", "--input", "corpus"], "expected ROLE=ARTIFACT"),
    (["submit", "tiny", "--stage", "pretrain", "--input", "corpus=art_deadbeef00"], "no artifact art_deadbeef00"),
    (["submit", "tiny", "--stage", "pretrain", "--input", "corpus=tiny/data/sft:latest"], "must be a corpus artifact"),
    (["submit", "tiny", "--stage", "pretrain", "--input", "corpus=tiny/data/corpus:v9"], "has no version v9"),
    (["submit", "tiny", "--stage", "data", "--executor", "moon"], "unknown executor 'moon'"),
    (["show", "art_00000000"], "no artifact art_00000000"),
    (["show", "0000"], "no run 0000"),
    (["lineage", "tiny/nothing/here:latest"], "no artifact is named"),
    (["submit", "tiny"], "--stage"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(data_store, tmp_path, args, message):
    store = tmp_path / "store"
    shutil.copytree(data_store, store)
    Store(store).index()
    before = tree_digest(store)
    r = run_jobs(store, *args)
    assert r.code == 2, (r.out, r.err)
    assert message in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.startswith("jobs: error: ")
    assert tree_digest(store) == before


def test_missing_store_is_refused_and_not_created(tmp_path):
    r = run_jobs(tmp_path / "none", "list")
    assert r.code == 2 and "no store at" in r.err
    assert not (tmp_path / "none").exists()


def test_unwritable_store_is_refused_and_unchanged(data_store, tmp_path):
    store = tmp_path / "ro"
    shutil.copytree(data_store, store)
    Store(store).index()
    before = tree_digest(store)
    subprocess.run(["mount", "--bind", str(store), str(store)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(store)], check=True)
        r = run_jobs(store, "submit", "tiny", "--stage", "data")
    finally:
        subprocess.run(["umount", str(store)], check=True)
    assert r.code == 2 and "not writable" in r.err and len(r.err.strip().splitlines()) == 1
    assert tree_digest(store) == before


def test_store_from_environment(tmp_path):
    store = tmp_path / "env store"
    p = subprocess.run([str(Path(__import__("sys").executable).parent / "jobs"), "submit", "tiny", "--stage", "data",
                        "data.n_sft=10", "data.n_prefs=10", "data.n_rl=10", "data.n_corpus_lines=10"],
                       env={**__import__("os").environ, "JOBS_HOME": str(store)}, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (store / "jobs-store.json").exists()
