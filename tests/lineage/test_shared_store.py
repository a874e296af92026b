"""A store a team shares: another member reads every artifact, and a copy of the store is a store of
its own.

One small finished tiny store (data, a short pretrain, two versions of an added file) is made once,
as a team store: its root belongs to a group and is setgid (`chgrp TEAM; chmod 2770`), the model the
README documents. The tests then read it as a second Unix user of that group, and copy it elsewhere
to verify, reproduce and gc the copy while the original must not change by a byte.
"""
from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from helpers import MATE, TEAM, ensure_mate, run_jobs, tree_state
from lineage import Store

SHORT = ["pretrain.steps=20", "pretrain.warmup=2", "pretrain.log_every=5", "pretrain.checkpoint_every=10"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a second Unix user needs root (CI has it)")


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """(store root, cache dir, the data run) of a team store that the tiny data and a short pretrain filled."""
    ensure_mate()
    # pytest's own temp folders are 0700: another user could not reach a store inside them.
    top = Path(tempfile.mkdtemp(prefix="jobs-team-", dir="/tmp"))
    os.chmod(top, 0o755)
    root = top / "store"
    root.mkdir()
    os.chown(root, -1, grp.getgrnam(TEAM).gr_gid)
    os.chmod(root, 0o2770)
    cache = tmp_path_factory.mktemp("team-cache")
    env = {"JOBS_CACHE_DIR": str(cache)}
    r = run_jobs(root, "submit", "tiny", "--stage", "data,pretrain", *SHORT, "tracking.wandb=disabled",
                 env=env, timeout=1200)
    assert r.code == 0, r.out + r.err
    for i in (1, 2):   # v1 is then nothing's :latest and nothing's input: what gc collects
        f = top / f"extra-{i}"
        f.mkdir()
        (f / "train.txt").write_text(f"an added corpus, version {i}\n")
        r = run_jobs(root, "add", str(f), "--kind", "corpus", "--name", "team/extra", env=env)
        assert r.code == 0, r.err
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JOBS_CACHE_DIR", str(cache))
        data_run = next(r["id"] for r in Store(root).index().runs(stage="data"))
    yield root, cache, data_run
    shutil.rmtree(top)


LOADER = textwrap.dedent("""
    # Standard library only: reads the store's records and every file of every artifact, checks each
    # file's SHA-256 against the record, and loads every tensor of every *.safetensors file.
    import hashlib, json, math, os, struct, sys
    root = sys.argv[1]
    SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
    files = tensors = 0
    kinds = set()
    for fan in sorted(os.listdir(os.path.join(root, "records", "artifact"))):
        folder = os.path.join(root, "records", "artifact", fan)
        for name in sorted(os.listdir(folder)):
            if name.startswith("."):
                continue
            rec = json.load(open(os.path.join(folder, name)))
            kinds.add(rec["kind"])
            base = rec["path"] if os.path.isabs(rec["path"]) else os.path.join(root, rec["path"])
            for e in rec["manifest"]:
                path = os.path.join(base, e["path"]) if rec["is_dir"] else base
                data = open(path, "rb").read()
                assert "sha256:" + hashlib.sha256(data).hexdigest() == e["digest"], path
                files += 1
                if path.endswith(".safetensors"):
                    (n,) = struct.unpack("<Q", data[:8])
                    header = json.loads(data[8:8 + n])
                    for key, t in header.items():
                        if key == "__metadata__":
                            continue
                        begin, end = t["data_offsets"]
                        assert end - begin == math.prod(t["shape"]) * SIZES[t["dtype"]], (path, key)
                        assert len(data[8 + n + begin:8 + n + end]) == end - begin, (path, key)
                        tensors += 1
    print(json.dumps({"files": files, "tensors": tensors, "kinds": sorted(kinds)}))
""")


def python_for(user: str) -> str:
    """An interpreter the user may run: the system's, or this one's base."""
    for exe in ("/usr/bin/python3", getattr(sys, "_base_executable", ""), sys.executable):
        if exe and subprocess.run(["runuser", "-u", user, "--", "test", "-x", exe]).returncode == 0:
            return exe
    pytest.fail(f"no Python interpreter that {user} may run")


def test_a_second_member_of_the_group_reads_every_artifact_weights_included(team, monkeypatch):
    root, cache, _ = team
    monkeypatch.setenv("JOBS_CACHE_DIR", str(cache))
    s = Store(root)
    arts = s.index().artifacts()
    kinds = {a["kind"] for a in arts}
    assert {"code", "corpus", "sft-data", "tokenizer", "model"} <= kinds, kinds
    weights = [Path(a["path"]) / e["path"] for a in arts for e in s.artifact(a["id"])["manifest"]
               if e["path"].endswith(".safetensors")]
    assert weights, "the pretrain stage wrote no safetensors"
    for w in weights:   # read-only for everyone in the group, no more and no less
        st = w.stat()
        assert stat.S_IMODE(st.st_mode) == 0o440 and st.st_gid == grp.getgrnam(TEAM).gr_gid, (w, oct(st.st_mode))
    p = subprocess.run(["runuser", "-u", MATE, "--", python_for(MATE), "-c", LOADER, str(root)],
                       capture_output=True, text=True, timeout=600, cwd="/")
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    assert got["kinds"] == sorted(kinds)
    assert got["files"] == sum(len(s.artifact(a["id"])["manifest"]) for a in arts)
    assert got["tensors"] > 0
    # Nobody outside the group gets in: the root is 2770.
    nobody = subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", str(weights[0])])
    assert nobody.returncode != 0


def test_a_second_member_reads_a_runs_progress_total_and_eta(team, monkeypatch):
    """progress.json and metrics.jsonl, rewritten while the job runs, take the run folder's read bits
    (the store's group), whatever the job's umask: a member's `jobs status` shows step/total and ETA."""
    root, cache, _ = team
    monkeypatch.setenv("JOBS_CACHE_DIR", str(cache))
    s = Store(root)
    run = next(r["id"] for r in s.index().runs(stage="pretrain"))
    folder = s.run_dir(run)
    for name in ("progress.json", "metrics.jsonl"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o640, (name, oct((folder / name).stat().st_mode))
    read = "import json, sys; p = json.load(open(sys.argv[1])); print(p['step'], p['total'], p['eta_s'])"
    p = subprocess.run(["runuser", "-u", MATE, "--", python_for(MATE), "-c", read, str(folder / "progress.json")],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 0 and p.stdout.split() == ["20", "20", "0.0"], p.stdout + p.stderr
    p = subprocess.run(["runuser", "-u", MATE, "--", "tail", "-n", "1", str(folder / "metrics.jsonl")],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 0 and json.loads(p.stdout)["step"] == 20, p.stdout + p.stderr


def test_jobs_show_prints_the_modes_on_disk(team):
    root, cache, _ = team
    r = run_jobs(root, "show", "tiny/pretrain/model:latest", env={"JOBS_CACHE_DIR": str(cache)})
    assert r.code == 0, r.err
    shown = [line for line in r.out.splitlines() if "model.safetensors" in line]
    assert shown and "-r--r----- 0440" in shown[0], r.out
    assert "dr-xr-s--- 2550" in r.out or "dr-xr-x--- 0550" in r.out, r.out


def test_a_copied_store_verifies_reproduces_and_collects_itself_only(team, tmp_path, monkeypatch):
    root, cache, data_run = team
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    original = tree_state(root)
    copy = tmp_path / "elsewhere" / "store"
    shutil.copytree(root, copy, symlinks=True)
    env = {"JOBS_CACHE_DIR": str(tmp_path / "cache")}
    c = Store(copy)
    # Tamper with the copy only: one file of the data run's SFT pairs.
    sft = c.run(data_run).outputs["sft"]
    target = next(p for p in Path(c.artifact(sft)["path"]).rglob("*") if p.is_file())
    assert str(target).startswith(str(copy))
    os.chmod(target, 0o640)
    with open(target, "ab") as f:
        f.write(b"tampered\n")

    r = run_jobs(copy, "verify", "--all", env=env)
    assert r.code == 1, r.out + r.err
    (finding,) = [line for line in r.out.splitlines() if line.startswith("CORRUPT")]
    assert sft in finding and str(copy) in finding and f"{root}/" not in finding

    r = run_jobs(copy, "reproduce", data_run, env=env, timeout=900)
    assert r.code == 0 and "reproduced bit for bit" in r.out, r.out + r.err
    assert f"{copy}/runs/" in r.out and f"{root}/" not in r.out, r.out   # it ran in the copy, not the original

    r = run_jobs(copy, "gc", "--yes", "--older-than", "0", env=env)
    assert r.code == 0, r.err
    (deleted,) = [line for line in r.out.splitlines() if line.startswith("delete ")]
    assert f"{copy}/imports/" in deleted, r.out

    r = run_jobs(copy, "verify", "--all", env=env)
    assert r.code == 0, r.out + r.err
    # Records name the store's own files relative to its root: neither root appears in one.
    for kind in ("artifact", "location"):
        for rec in (copy / "records" / kind).rglob("*.json"):
            text = rec.read_text()
            assert str(root) not in text and str(copy) not in text, rec
    assert tree_state(root) == original
    assert run_jobs(root, "verify", "--all", env={"JOBS_CACHE_DIR": str(cache)}).code == 0


def test_records_from_before_relative_paths_map_into_the_store_that_reads_them(team, tmp_path, monkeypatch):
    """An old record holds the absolute path the store had then; a copy reads its own files."""
    root, cache, data_run = team
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "old-format" / "store"
    shutil.copytree(root, copy, symlinks=True)
    c = Store(copy)
    for rec in (copy / "records" / "artifact").rglob("art_*.json"):
        obj = json.loads(rec.read_text())
        assert not os.path.isabs(obj["path"])
        obj["path"] = f"{root}/{obj['path']}"          # as written before: absolute, the original's
        os.chmod(rec, 0o640)
        rec.write_text(json.dumps(obj))
    for a in c.index().artifacts():
        assert str(Path(a["path"])).startswith(f"{copy}/"), a["path"]
        c.verify(a["id"])
    outside = {"id": "art_" + "0" * 64, "path": "/data/corpus", "producer": None}
    assert c.locate(outside["path"], art_id=outside["id"]) == Path("/data/corpus")
