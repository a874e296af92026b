"""Exports read by the real tools: `dvc status/push/pull` on our .dvc files; OpenLineage events."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import count_once, run_jobs
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


SPEC = Path(__file__).parents[1] / "fixtures" / "openlineage"
TESTCHAIN = {"JOBS_RECIPES": str(Path(__file__).parents[1] / "fixtures" / "recipes"),
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "fixtures"), os.environ.get("PYTHONPATH", "")])}


def spec_validator(url: str):
    """A validator for the schema `url` points at (a JSON pointer into the spec's published files)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    docs = [json.loads((SPEC / f).read_text()) for f in ("OpenLineage.json", "ErrorMessageRunFacet.json")]
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)
    registry.resolver().lookup(url)                     # raises when the pointer does not resolve
    return Draft202012Validator({"$ref": url}, registry=registry)


def test_openlineage_events_validate_against_the_spec_and_fail_carries_the_error(tmp_path):
    from datetime import datetime

    root = count_once(tmp_path, TESTCHAIN)
    r = run_jobs(root, "submit", "testchain", "--stage", "count", "count.fail=true", env=TESTCHAIN)
    assert r.code == 1, r.err
    store = Store(root)
    ok, failed = sorted(store.index().runs(stage="count"), key=lambda row: row["state"] == "FAILED")
    assert (ok["state"], failed["state"]) == ("SUCCEEDED", "FAILED")
    seen = {}
    for run in (ok["id"], failed["id"]):
        r = run_jobs(root, "export", run, "--openlineage", env=TESTCHAIN)
        assert r.code == 0, r.err
        for event in map(json.loads, r.out.splitlines()):
            errors = sorted(e.message for e in spec_validator(event["schemaURL"]).iter_errors(event))
            assert not errors, errors
            assert datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
            for facet in event["run"].get("facets", {}).values():
                assert not list(spec_validator("https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet")
                                .iter_errors(facet))
                if "openlineage.io" in facet["_schemaURL"]:
                    assert not list(spec_validator(facet["_schemaURL"]).iter_errors(facet))
            seen[(run, event["eventType"])] = event
    assert set(seen) == {(ok["id"], "START"), (ok["id"], "COMPLETE"), (failed["id"], "START"), (failed["id"], "FAIL")}
    error = seen[(failed["id"], "FAIL")]["run"]["facets"]["errorMessage"]
    assert "failing on purpose (count.fail=true)" in error["message"] and error["programmingLanguage"] == "PYTHON"
    assert "facets" not in seen[(ok["id"], "COMPLETE")]["run"]
    # The pointer the events used before (#/definitions/RunEvent) does not resolve in the spec.
    with pytest.raises(Exception):
        spec_validator("https://openlineage.io/spec/2-0-2/OpenLineage.json#/definitions/RunEvent")


def test_a_dvc_export_is_updated_to_a_newer_version_of_the_same_name(tmp_path):
    store, repo = tmp_path / "store", tmp_path / "repo"
    versions = []
    for n in (1, 2):
        mine = tmp_path / f"v{n}"
        mine.mkdir()
        (mine / "test.jsonl").write_text(json.dumps({"prompt": f"{n}+1=", "answer": str(n + 1)}) + "\n")
        r = run_jobs(store, "add", str(mine), "--kind", "eval-data", "--name", "mine/evalset")
        assert r.code == 0, r.err
        versions.append(r.out.split()[0])
    other = tmp_path / "other"
    other.mkdir()
    (other / "test.jsonl").write_text(json.dumps({"prompt": "9+9=", "answer": "18"}) + "\n")
    assert run_jobs(store, "add", str(other), "--kind", "eval-data", "--name", "other/evalset").code == 0
    repo.mkdir()
    sh(repo, "git", "init", "-q")
    sh(repo, DVC, "init", "-q")
    assert run_jobs(store, "export", "mine/evalset:v1", "--dvc", str(repo), "--name", "evalset").code == 0
    r = run_jobs(store, "export", "mine/evalset:v2", "--dvc", str(repo), "--name", "evalset")
    assert r.code == 0, r.err
    assert "up to date" in sh(repo, DVC, "status")
    assert (repo / "evalset" / "test.jsonl").read_text() == (tmp_path / "v2" / "test.jsonl").read_text()
    assert versions[1] in (repo / "evalset.dvc").read_text()
    # Edited since the export, or another name's artifact: refused in one line, nothing replaced.
    (repo / "evalset" / "test.jsonl").write_text("edited\n")
    r = run_jobs(store, "export", "mine/evalset:v1", "--dvc", str(repo), "--name", "evalset")
    assert r.code == 2 and "test.jsonl was edited" in r.err and r.err.count("\n") == 1, r.err
    assert (repo / "evalset" / "test.jsonl").read_text() == "edited\n"
    (repo / "evalset" / "test.jsonl").write_text((tmp_path / "v2" / "test.jsonl").read_text())
    r = run_jobs(store, "export", "other/evalset:v1", "--dvc", str(repo), "--name", "evalset")
    assert r.code == 2 and "not a version of" in r.err, r.err
