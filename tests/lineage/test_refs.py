"""Versions of a name stay unique, gap-free and `:latest` stays right whatever the `.latest` hint says."""
import subprocess
import sys
import textwrap
import time

import pytest

from lineage import Store, refs
from lineage.errors import NotFound

ARTS = [f"art_{i:064x}" for i in range(1, 200)]


def numbers(store: Store, name: str) -> list[int]:
    return refs.versions(store.refs, name)


def test_register_and_resolve_whatever_the_hint_says(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    name = "tiny/sft/model"
    for art in ARTS[:20]:
        refs.add(store.refs, name, art, None)
    hint = store.refs / name / refs.HINT
    assert hint.read_text() == "20\n"
    cases = {"stale": b"3\n", "zero": b"0", "garbage": b"\x00\xffnot a number", "ahead": b"999999999\n",
             "negative": b"-5", "empty": b""}
    for why, text in [*cases.items(), ("missing", None)]:
        if text is None:
            hint.unlink()
        else:
            hint.write_bytes(text)
        n = len(numbers(store, name))
        assert store.resolve_artifact(f"{name}:latest") == ARTS[n - 1], why
        assert store.resolve_artifact(f"{name}:v7") == ARTS[6], why
        with pytest.raises(NotFound, match=f"has no version v{n + 1}; latest is v{n}"):
            store.resolve_artifact(f"{name}:v{n + 1}")
        assert refs.add(store.refs, name, ARTS[n], None) == n + 1, why
        assert store.resolve_artifact(f"{name}:latest") == ARTS[n], why
    assert numbers(store, name) == list(range(1, 28))
    # A hint that is a folder or a link is no hint either, and is never followed.
    hint.unlink()
    hint.symlink_to(store.refs / name / "v000003.json")
    assert refs.add(store.refs, name, ARTS[27], None) == 28
    assert store.resolve_artifact(f"{name}:latest") == ARTS[27]
    assert (store.refs / name / "v000003.json").read_bytes().startswith(b"{")


def test_reads_never_write_the_hint(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    for art in ARTS[:5]:
        refs.add(store.refs, "a/b", art, None)
    (store.refs / "a/b" / refs.HINT).write_text("2\n")
    assert store.resolve_artifact("a/b:latest") == ARTS[4]
    assert (store.refs / "a/b" / refs.HINT).read_text() == "2\n"
    with pytest.raises(NotFound, match="no artifact is named 'a'"):
        store.resolve_artifact("a:latest")


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lineage import refs
    root, tag, n, start = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    while time.time() < start:
        time.sleep(0.001)
    for i in range(n):
        refs.add(root, "tiny/sft/model", f"art_{tag * 1000 + i:064x}", f"writer{tag}")
""")


def test_two_writer_processes_take_unique_gap_free_numbers(tmp_path):
    store = Store.open(tmp_path / "s", create=True)
    refs.add(store.refs, "tiny/sft/model", ARTS[0], None)
    (store.refs / "tiny/sft/model" / refs.HINT).write_text("garbage")
    start = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store.refs), str(k), "150", str(start)])
             for k in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert numbers(store, "tiny/sft/model") == list(range(1, 302))
    seen = [refs.read(refs.version_path(store.refs / "tiny/sft/model", v))["artifact"] for v in range(1, 302)]
    assert len(set(seen)) == 301
    # Each writer's versions come in the order it wrote them.
    for k in (1, 2):
        mine = [int(a[4:], 16) - k * 1000 for a in seen if 1000 * k <= int(a[4:], 16) < 1000 * k + 1000]
        assert mine == list(range(150))
    assert store.resolve_artifact("tiny/sft/model:latest") == seen[-1]
    assert store.index().db.execute("SELECT count(*) FROM refs").fetchone()[0] == 301


def test_index_sync_probes_a_known_name_and_finds_new_names(tmp_path, monkeypatch):
    from lineage.index import Index

    store = Store.open(tmp_path / "s", create=True)
    for art in ARTS[:5]:
        refs.add(store.refs, "a", art, None)
    assert len(store.index().dump()["refs"]) == 5
    for art in ARTS[5:8]:
        refs.add(store.refs, "a", art, None)
    big = str(store.refs / "a")
    real_scandir = __import__("os").scandir

    def no_listing(path="."):
        assert str(path) != big, "the index listed a known name's folder"
        return real_scandir(path)

    monkeypatch.setattr("os.scandir", no_listing)
    assert [r[1] for r in store.index().dump()["refs"]] == list(range(1, 9))
    monkeypatch.undo()
    refs.add(store.refs, "a/b", ARTS[8], None)      # a new name inside a known name's folder
    refs.add(store.refs, "c/d/e", ARTS[9], None)    # and a new one elsewhere
    refs.add(store.refs, "a", ARTS[10], None)
    incremental = store.index().dump()
    assert sorted((r[0], r[1]) for r in incremental["refs"]) == (
        [("a", v) for v in range(1, 10)] + [("a/b", 1), ("c/d/e", 1)])
    Index(store).rebuild()
    assert Index(store).dump() == incremental
