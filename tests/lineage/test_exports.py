"""Exports read by the real tools: `dvc status/push/pull` on our .dvc files; OpenLineage events."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from helpers import run_jobs
from lineage import Store

DVC = str(Path(sys.executable).parent / "dvc")


def sh(cwd: Path, *cmd: str) -> str:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, f"{cmd}: {p.stdout}{p.stderr}"
    return p.stdout


def test_dvc_accepts_the_export_and_a_fresh_clone_pulls_identical_files(data_store, tmp_path):
    repo, remote, clone = tmp_path / "repo", tmp_path / "remote", tmp_path / "clone"
    repo.mkdir()
    sh(repo, "git", "init", "-q")
    sh(repo, "git", "config", "user.email", "t@t")
    sh(repo, "git", "config", "user.name", "t")
    sh(repo, DVC, "init", "-q")
    sh(repo, DVC, "remote", "add", "-d", "local", str(remote))
    r = run_jobs(data_store, "export", "tiny/data/tokenizer:latest", "--dvc", str(repo))
    assert r.code == 0, r.err
    assert "up to date" in sh(repo, DVC, "status")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "export")
    pushed = sh(repo, DVC, "push")
    assert "3 files pushed" in pushed, pushed   # two tokenizer files and the .dir listing
    sh(tmp_path, "git", "clone", "-q", str(repo), str(clone))
    sh(clone, DVC, "pull", "-q")
    store = Store(data_store)
    record = store.artifact(store.resolve_artifact("tiny/data/tokenizer:latest"))
    for e in record["manifest"]:
        pulled = clone / "tiny-data-tokenizer" / e["path"]
        assert "sha256:" + hashlib.sha256(pulled.read_bytes()).hexdigest() == e["digest"]


def test_dvc_export_refuses_a_non_dvc_folder(data_store, tmp_path):
    r = run_jobs(data_store, "export", "tiny/data/sft:latest", "--dvc", str(tmp_path))
    assert r.code == 2 and "not a DVC repository" in r.err


def test_openlineage_events_have_the_spec_fields(data_store, tmp_path):
    store = Store(data_store)
    run = store.index().runs(stage="data")[0]["id"]
    r = run_jobs(data_store, "export", run, "--openlineage", "--out", str(tmp_path / "ol.jsonl"))
    assert r.code == 0, r.err
    events = [json.loads(line) for line in (tmp_path / "ol.jsonl").read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for e in events:
        for key in ("eventType", "eventTime", "run", "job", "producer", "schemaURL"):
            assert key in e
        assert e["run"]["runId"] == run and e["job"]["name"] == "tiny.data"
        assert e["eventTime"].endswith("Z")
    outputs = {o["name"] for o in events[1]["outputs"]}
    assert outputs == set(store.run(run).outputs.values())
