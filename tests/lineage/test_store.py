import json
import os
import stat
from pathlib import Path

import pytest

from lineage import Store
from lineage.errors import Ambiguous, Corrupt, LineageError, NotFound, StoreUnusable
from lineage.hashing import Digest, StatCache, artifact_id, manifest
from lineage.ids import uuid7
from lineage.records import canonical_json


def make_dir(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def test_uuid7_is_time_sortable_and_versioned():
    ids = [uuid7() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)


def test_canonical_json_is_order_independent():
    assert canonical_json({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == canonical_json({"a": [1, {"x": 1, "y": 2}], "b": 1})


def test_artifact_id_is_sha256_of_sorted_manifest(tmp_path):
    d = make_dir(tmp_path / "a", {"z.bin": b"zz", "dir/a.txt": b"hello", "m.sh": b"#!/bin/sh\n"})
    os.chmod(d / "m.sh", 0o755)
    entries = manifest(d)
    assert [e["path"] for e in entries] == ["dir/a.txt", "m.sh", "z.bin"]
    assert entries[0] == {"path": "dir/a.txt", "size": 5, "mode": 0o644,
                          "digest": "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}
    assert entries[1]["mode"] == 0o755
    import hashlib
    assert artifact_id(entries) == "art_" + hashlib.sha256(canonical_json(entries)).hexdigest()


def test_identical_content_has_identical_id_anywhere(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    a = store.register(make_dir(tmp_path / "x", {"w.bin": b"1" * 1000}), kind="model")
    b = store.register(make_dir(tmp_path / "y", {"w.bin": b"1" * 1000}), kind="model")
    c = store.register(make_dir(tmp_path / "z", {"w.bin": b"2" * 1000}), kind="model")
    assert a == b != c


def test_register_makes_read_only_and_verify_detects_corruption(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    d = make_dir(tmp_path / "ckpt", {"model.safetensors": os.urandom(4096), "config.json": b"{}"})
    art = store.register(d, kind="model", name="t/pretrain/model")
    for p in [d, d / "config.json", d / "model.safetensors"]:
        assert not p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    store.verify(art)
    os.chmod(d / "config.json", 0o644)
    (d / "config.json").write_bytes(b'{"x": 1}')
    with pytest.raises(Corrupt, match="changed config.json"):
        store.verify(art)


def test_refs_versions_and_latest(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    ids = [store.register(make_dir(tmp_path / f"d{i}", {"f": bytes([i])}), kind="model", name="tiny/sft/model")
           for i in range(3)]
    assert store.resolve_artifact("tiny/sft/model:latest") == ids[2]
    assert store.resolve_artifact("tiny/sft/model:v1") == ids[0]
    assert store.resolve_artifact(ids[1][:10]) == ids[1]
    with pytest.raises(NotFound, match="no version v9"):
        store.resolve_artifact("tiny/sft/model:v9")
    with pytest.raises(NotFound):
        store.resolve_artifact("tiny/rm/model:latest")
    with pytest.raises(LineageError):
        store.resolve_artifact("tiny/sft/model:newest")
    with pytest.raises(LineageError):
        store.register(make_dir(tmp_path / "bad", {"f": b"x"}), kind="model", name="Bad Name")


def test_ambiguous_prefix_is_refused(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    folder = store.records / "artifact" / "ab"
    folder.mkdir(parents=True)
    for tail in ("1", "2"):
        ident = "art_abcd" + tail * 60
        (folder / f"{ident}.json").write_text(json.dumps({"id": ident, "kind": "model"}))
    with pytest.raises(Ambiguous, match="matches 2"):
        store.resolve_artifact("art_abcd")
    assert store.resolve_artifact("art_abcd1") == "art_abcd" + "1" * 60


def test_stat_cache_skips_unchanged_files(tmp_path, monkeypatch):
    d = make_dir(tmp_path / "d", {"a": b"a" * 10, "b": b"b" * 10})
    cache = StatCache(tmp_path / "stat.sqlite")
    first = manifest(d, cache)
    read = []
    import lineage.hashing as hashing
    real = hashing.hash_file
    monkeypatch.setattr(hashing, "hash_file", lambda p: read.append(p.name) or real(p))
    assert manifest(d, cache) == first and read == []
    (d / "b").write_bytes(b"B" * 11)
    second = manifest(d, cache)
    assert read == ["b"] and second[1]["size"] == 11


def test_run_state_is_the_fold_of_events(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    run = store.create_run({"recipe": "tiny", "stage": "data", "inputs": {}, "config": {}})
    assert store.run(run).state == "QUEUED"
    store.add_event(run, "status", state="RUNNING")
    store.add_event(run, "outputs", outputs={"x": "art_1"})
    store.add_event(run, "status", state="SUCCEEDED")
    view = store.run(run)
    assert (view.state, view.outputs) == ("SUCCEEDED", {"x": "art_1"})
    records = list((store.root / "records").rglob("*.json"))
    assert len(records) == 5 and all(json.loads(p.read_text()) for p in records)


def test_a_cancel_is_final_though_a_racing_job_records_its_start_after_it(tmp_path):
    """scancel took the job while it was starting: the job read its run before the cancel and writes
    its attempt and RUNNING after it (Slurm kills it only after KillWait)."""
    store = Store.open(tmp_path / "s", create=True)
    run = store.create_run({"recipe": "tiny", "stage": "data", "inputs": {}, "config": {}})
    store.add_event(run, "status", state="CANCELLED", reason="cancelled by user")
    store.add_event(run, "attempt", attempt=1, start=1.0)
    store.add_event(run, "status", state="RUNNING")
    view = store.run(run)
    assert (view.state, view.reason, len(view.attempts)) == ("CANCELLED", "cancelled by user", 1)

def test_open_refuses_unusable_paths(tmp_path):
    with pytest.raises(StoreUnusable, match="no store"):
        Store.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnusable, match="not a directory"):
        Store.open(tmp_path / "file", create=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "thing").write_text("x")
    with pytest.raises(StoreUnusable, match="non-empty"):
        Store.open(tmp_path / "full", create=True)


def test_digest_carries_its_algorithm():
    d = Digest.parse("sha256:abc")
    assert (d.algorithm, d.value, str(d)) == ("sha256", "abc", "sha256:abc")
    with pytest.raises(ValueError):
        Digest.parse("abc")


def test_register_checks_every_entry_before_the_first_chmod(tmp_path):
    """A link deep in the tree is found before any file is made read-only, and its target keeps its mode."""
    from lineage.errors import Unsafe

    store = Store.open(tmp_path / "s", create=True)
    victim = make_dir(tmp_path / "outside", {"victim": b"x"}) / "victim"
    os.chmod(victim, 0o666)
    d = make_dir(tmp_path / "out", {"a.txt": b"a", "z/deep/b.txt": b"b"})
    os.symlink(victim, d / "z" / "deep" / "zz-link")
    with pytest.raises(Unsafe, match="zz-link is a symbolic link") as e:
        store.register(d, kind="model")
    assert "\n" not in str(e.value)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o666
    assert (d / "a.txt").stat().st_mode & stat.S_IWUSR and (d / "z").stat().st_mode & stat.S_IWUSR
    assert not (store.records / "artifact").exists()


def test_stat_cache_catches_a_same_size_same_mtime_edit(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    d = make_dir(tmp_path / "d", {"w": b"1234"})
    art = store.register(d, kind="model", name="t/model")
    store.verify(art)  # fills the stat cache
    f = d / "w"
    st = f.stat()
    os.chmod(f, 0o644)
    f.write_bytes(b"9234")
    os.chmod(f, stat.S_IMODE(st.st_mode))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(Corrupt, match="changed w"):
        store.verify(art)
    with pytest.raises(Corrupt, match="t/model:latest is corrupt: .* changed w"):
        store.resolve_verified("t/model:latest")


def test_names_and_run_ids_stay_inside_the_store(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    for bad in ("/etc/passwd:latest", "../x:latest", "a/../../b:v1", "a//b:latest", "A:latest"):
        with pytest.raises(LineageError, match="bad artifact name"):
            store.resolve_artifact(bad)
    run = store.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
    idx = store.index()
    assert idx.resolve_run(run) == run and idx.resolve_run(run[:8]) == run
    for bad in ("%", "_", run[:4] + "%", "' OR 1=1 --"):
        with pytest.raises(LineageError, match="bad run ID"):
            idx.resolve_run(bad)


def test_damaged_records_name_their_file(tmp_path):
    from lineage.errors import Damaged

    store = Store.open(tmp_path / "s", create=True)
    run = store.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
    path = store._path("run", run)
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(Damaged, match=f"{path}: truncated"):
        store.run(run)
    with pytest.raises(Damaged, match=str(path)):
        store.index()


def test_concurrent_creators_both_open_the_store(tmp_path):
    """A creator that finds only another creator's half-written marker takes the folder as empty."""
    root = tmp_path / "new"
    root.mkdir()
    (root / ".jobs-store.json.abc.tmp").write_text("")
    assert Store.open(root, create=True).root == root
    assert Store.open(root).root == root


def test_the_root_folders_mode_reaches_every_folder_record_and_artifact_whatever_the_umask(tmp_path, monkeypatch):
    """A team store: root 2770. A job with umask 077 writes weights 0600 in folders 0700; after
    registration the group reads all of it, and every folder the store made lets the group add more
    (and remove only their own)."""
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "team"
    root.mkdir()
    os.chmod(root, 0o2770)
    old = os.umask(0o077)
    try:
        s = Store.open(root, create=True)
        run = s.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
        out = s.run_dir(run) / "outputs" / "model"
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"weights")
        (out / "run.sh").write_bytes(b"#!/bin/sh\n")
        os.chmod(out / "run.sh", 0o700)
        art = s.register(out, kind="model", name="team/model")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.lstat(p).st_mode)  # noqa: E731
    for top in ("records", "refs", "runs", "code", "imports", f"runs/{run}", "records/artifact", "refs/team/model"):
        assert mode(root / top) == 0o3770, top   # sticky: a member adds, but removes only their own
    assert mode(root / "refs" / "team" / "model" / ".latest") == 0o660   # the hint: read and rewritten by the group
    for rec in [*(root / "records").rglob("*.json"), *(root / "refs").rglob("v*.json"), root / "jobs-store.json"]:
        assert mode(rec) == 0o440, rec
    assert mode(out) == 0o550 and mode(out / "model.safetensors") == 0o440 and mode(out / "run.sh") == 0o550
    assert mode(out.parent) & 0o550 == 0o550       # outputs/, made 0700 by the job, is reachable
    assert s.artifact(art)["path"] == str(out)
    assert json.loads(s._path("artifact", art).read_text())["path"] == f"runs/{run}/outputs/model"


def test_a_private_store_keeps_artifacts_readable_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "private"
    root.mkdir()
    os.chmod(root, 0o755)
    s = Store.open(root, create=True)
    d = make_dir(s.root / "imports" / uuid7() / "x", {"w.safetensors": b"w"})
    os.chmod(d / "w.safetensors", 0o600)
    s.register(d, kind="model")
    assert stat.S_IMODE((d / "w.safetensors").stat().st_mode) == 0o444 and stat.S_IMODE(d.stat().st_mode) == 0o555
