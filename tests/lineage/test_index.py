import os
import shutil

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
        arts.append(store.register(d, kind="model", name="tiny/sft/model", run=run))
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
    for folder in [store.refs, *store.records.rglob("*")]:   # every folder a sync visits
        if folder.is_dir():
            os.utime(folder, (1, 1))  # older than the settle window
    store.index()
    before = (store.cache / "index.sqlite").read_bytes()
    store.index()
    assert (store.cache / "index.sqlite").read_bytes() == before


def test_a_shared_artifacts_producer_is_found_without_scanning_its_consumers(tmp_path):
    """`jobs lineage` asks each ancestor's producer; a data artifact every run reads has as many
    consumer edges as runs (bench/lineage.py: 100k, 558 ms for a 40-deep lineage before). An index
    written by the earlier schema (edges by artifact alone) changes in place at the next sync."""
    store = Store.open(tmp_path / "store", create=True)
    maker = store.create_run({"recipe": "tiny", "stage": "data", "inputs": {}, "config": {}})
    d = tmp_path / "data"
    d.mkdir()
    (d / "rows").write_bytes(os.urandom(64))
    data = store.register(d, kind="sft-data", name="tiny/data/sft", run=maker)
    store.add_event(maker, "outputs", outputs={"data": data})
    readers = [store.create_run({"recipe": "tiny", "stage": "sft", "inputs": {"data": data}, "config": {"seed": i}})
               for i in range(50)]
    idx = store.index()
    idx.db.executescript("DROP INDEX edges_artifact_direction; CREATE INDEX edges_artifact ON edges (artifact);")
    idx = store.index()
    names = {r[0] for r in idx.db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "edges_artifact" not in names and "edges_artifact_direction" in names
    plan = " ".join(r[-1] for r in idx.db.execute(
        "EXPLAIN QUERY PLAN SELECT run, role FROM edges WHERE artifact=? AND direction='out'", (data,)))
    assert "edges_artifact_direction (artifact=? AND direction=?)" in plan, plan
    assert [(r["run"], r["role"]) for r in idx.producer(data)] == [(maker, "data")]
    assert sorted(r["run"] for r in idx.consumers(data)) == sorted(readers)


def test_a_store_made_again_at_the_same_path_is_not_served_the_old_ones_runs(tmp_path):
    """The index lives in the host's cache, keyed by the store's path: `rm -rf store` and a new
    submit there used to list the deleted store's runs, and `jobs submit` then chained to a run
    whose record was gone ("no run ...")."""
    old = Store.open(tmp_path / "store", create=True)
    gone = old.create_run({"recipe": "tiny", "stage": "sft", "inputs": {}, "config": {}})
    assert [r["id"] for r in old.index().runs()] == [gone]
    shutil.rmtree(old.root)
    new = Store.open(tmp_path / "store", create=True)
    assert new.cache == old.cache                   # the same cache folder
    assert new.index().runs() == []
    kept = new.create_run({"recipe": "tiny", "stage": "sft", "inputs": {}, "config": {}})
    assert [r["id"] for r in new.index().runs()] == [kept]
    synced = Index(new).dump()
    Index(new).rebuild()
    assert Index(new).dump() == synced
