"""`jobs add` brings the user's own data into the lineage; `--json` makes every listing scriptable."""
import json
import os
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """A store where the data stage ran, then the user's own corpus was added and pretrain read it."""
    root = tmp_path_factory.mktemp("add") / "store"
    assert run_jobs(root, "submit", "tiny", "--stage", "data").code == 0
    corpus = json.loads(run_jobs(root, "show", "tiny/data/corpus:latest", "--json").out)
    lines = (Path(corpus["path"]) / "train.txt").read_text().splitlines()
    mine = root.parent / "my corpus"
    mine.mkdir()
    (mine / "train.txt").write_text("\n".join(reversed(lines)) + "\n")   # the user's data, not the stage's
    r = run_jobs(root, "add", str(mine), "--kind", "corpus", "--name", "mine/corpus",
                 "--source", "https://example.org/corpus", "--revision", "r1")
    assert r.code == 0, r.err
    art = r.out.split()[0]
    r = run_jobs(root, "submit", "tiny", "--stage", "pretrain", "--input", "corpus=mine/corpus:latest",
                 "pretrain.steps=3", "pretrain.warmup=1", "pretrain.log_every=1", "pretrain.checkpoint_every=100")
    assert r.code == 0, r.err
    return root, mine, art


def test_an_added_folder_is_an_artifact_a_stage_reads(added):
    root, mine, art = added
    shown = json.loads(run_jobs(root, "show", "mine/corpus:latest", "--json").out)
    assert shown["id"] == art and shown["kind"] == "corpus" and shown["verified"] is True
    assert shown["producer"] is None and shown["names"] == ["mine/corpus:v1"]
    assert shown["metadata"]["origin"]["source"] == "https://example.org/corpus"
    assert shown["metadata"]["origin"]["revision"] == "r1" and shown["metadata"]["origin"]["path"] == str(mine)
    # a copy was registered: the user's own folder stays writable, and the artifact is its bytes
    assert os.access(mine / "train.txt", os.W_OK) and Path(shown["path"]) != mine
    assert (Path(shown["path"]) / "train.txt").read_bytes() == (mine / "train.txt").read_bytes()
    runs = json.loads(run_jobs(root, "list", "--json").out)
    pre = next(r for r in runs if r["stage"] == "pretrain")
    assert pre["state"] == "SUCCEEDED"
    record = json.loads(run_jobs(root, "show", pre["id"], "--json").out)
    assert record["inputs"]["corpus"] == art and record["type"] == "run"
    # The schedule's rate is lr_now, never a metric named like the config's pretrain.lr; the speed of
    # the whole run is run_tokens_per_s, the last log interval's interval_tokens_per_s.
    m = record["metrics"]
    assert "pretrain/lr" not in m and 0 < m["pretrain/lr_now"] <= record["spec"]["config"]["pretrain"]["lr"]
    assert m["pretrain/run_tokens_per_s"] > 0 and m["pretrain/interval_tokens_per_s"] > 0


def test_the_lineage_shows_an_added_artifact_as_a_root(added):
    root, _, art = added
    graph = json.loads(run_jobs(root, "lineage", "mine/corpus:latest", "--json").out)
    assert graph["artifact"] == art
    assert not [e for e in graph["edges"] if e["to"] == art]          # nothing produced it
    runs = {e["to"] for e in graph["edges"] if e["from"] == art and e["role"] == "corpus"}
    assert len(runs) == 1                                               # the pretrain run read it
    text = run_jobs(root, "lineage", "mine/corpus:latest").out
    assert "mine/corpus" in text


def test_json_listings_have_stable_keys(added):
    root, _, art = added
    arts = json.loads(run_jobs(root, "artifacts", "--json").out)
    assert all(set(a) == {"id", "kind", "size", "created", "names"} for a in arts)
    assert any(a["id"] == art and a["names"] == ["mine/corpus:v1"] for a in arts)
    runs = json.loads(run_jobs(root, "list", "--json").out)
    assert runs and all(set(r) == {"id", "recipe", "stage", "state", "executor", "created", "metrics", "duration_s",
                                   "ended"} for r in runs)


@pytest.mark.parametrize("args,says", [
    (["--kind", "weights", "--name", "x/y"], "no stage reads that kind"),
    (["--kind", "corpus", "--name", "Bad Name"], "bad artifact name"),
    (["--kind", "corpus", "--name", "../up"], "bad artifact name"),
])
def test_bad_add_is_one_line_and_changes_nothing(added, args, says):
    root, mine, _ = added
    before = tree_digest(root)
    r = run_jobs(root, "add", str(mine), *args)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert tree_digest(root) == before


def test_a_missing_path_or_a_link_inside_is_refused_and_leaves_nothing(added, tmp_path):
    root, mine, _ = added
    before = tree_digest(root)
    r = run_jobs(root, "add", str(tmp_path / "nope"), "--kind", "corpus", "--name", "x/y")
    assert r.code == 2 and "not a file or folder" in r.err
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "train.txt").write_text("1+1=2\n")
    (linked / "secret").symlink_to("/etc/passwd")
    r = run_jobs(root, "add", str(linked), "--kind", "corpus", "--name", "x/y")
    assert r.code == 2 and "secret" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert tree_digest(root) == before


def test_the_readmes_json_pipelines_run_as_written(added):
    """Every `jobs … --json | …` and `--jsonl | …` line of README.md, in a bash with the shell
    integration README says to source (`jobs` alone is bash's builtin), on this store (RUN: the
    pretrain run): each exits 0 with output, so a reader's copy of it works."""
    import re
    import subprocess
    import sys

    from jobs.cli import build_parser
    from jobs.shell import script
    from lineage import Store

    root, _, _ = added
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    lines = [x for x in readme.splitlines() if re.match(r"jobs \S.* --jsonl? \| python ", x)]
    assert len(lines) >= 6, lines
    run = Store(root).index().runs(stage="pretrain")[0]["id"]
    env = {**os.environ, "JOBS_HOME": str(root), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        text = script(str(Path(sys.executable).parent / "jobs"), build_parser()) + "\n" + line.replace(" RUN ", f" {run} ")
        p = subprocess.run(["bash", "-o", "pipefail", "-c", text], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.strip() and p.stderr == "", (line, p.stdout, p.stderr)


def test_status_json_prints_a_progress_file_nan_as_null(tmp_path):
    """A progress.json an earlier writer left with NaN and Infinity: status --json prints null."""
    import socket
    import time

    from lineage import Store
    from runtime.attempts import boot_id, proc_start

    s = Store.open(tmp_path / "store", create=True)
    run = s.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                        "executor": "local", "config": {}, "inputs": {}, "input_kinds": {},
                        "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
    pid = os.getpid()   # this process stands in for the job: alive, so the run shows as running
    s.add_event(run, "attempt", attempt=1, start=time.time(), host=socket.gethostname(), pid=pid,
                pgid=os.getpgid(pid), proc_start=proc_start(pid), boot_id=boot_id())
    s.add_event(run, "status", state="RUNNING")
    s.run_dir(run).mkdir(parents=True, exist_ok=True)
    (s.run_dir(run) / "progress.json").write_text(
        f'{{"stage": "count", "attempt": 1, "step": 3, "total": 10, "loss": NaN, "eta_s": Infinity, "time": {time.time()}}}')

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    (row,) = json.loads(run_jobs(tmp_path / "store", "status", "--json").out, parse_constant=refuse)
    assert row["run"] == run and row["step"] == 3 and row["total"] == 10 and row["loss"] is None and row["eta_s"] is None
