import os
from pathlib import Path

from lineage import Store
from lineage.index import Index


def test_rebuild_equals_incremental(tmp_path):
    store = Store.open(tmp_path / "store", create=True)
    arts = []
    for i in range(30):
        run = store.create_run({"recipe": "tiny", "stage": "sft", "inputs": {"data": f"art_{i:064x}"}, "config": {}})
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "w").write_bytes(os.urandom(64))
        arts.append(store.register(d, kind="model", name=f"tiny/sft/model", run=run))
        store.add_event(run, "outputs", outputs={"model": arts[-1]})
        store.add_event(run, "status", state="SUCCEEDED" if i % 3 else "FAILED", reason=None)
        if i % 7 == 0:
            store.index()  # incremental syncs between writes
    incremental = store.index().dump()
    assert len(incremental["runs"]) == 30 and len(incremental["refs"]) == 30
    Index(store).rebuild()
    assert Index(store).dump() == incremental
    states = {r[0]: r[5] for r in incremental["runs"]}
    assert sorted(states.values()).count("FAILED") == 10


def test_sync_without_changes_writes_nothing(tmp_path):
    store = Store.open(tmp_path / "store", create=True)
    store.create_run({"recipe": "tiny", "stage": "data", "inputs": {}, "config": {}})
    os.utime(store.records / "run", (0, 0))
    store.index()
    for folder in (store.records).rglob("*"):
        if folder.is_dir():
            os.utime(folder, (1, 1))  # older than the settle window
    store.index()
    before = (store.cache / "index.sqlite").read_bytes()
    store.index()
    assert (store.cache / "index.sqlite").read_bytes() == before
