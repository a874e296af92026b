"""The store under many writers and under SIGKILL: nothing lost, nothing half-visible."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from lineage import Store
from lineage.index import Index

WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from lineage import Store
    root, tag, n, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    store = Store(root)
    while time.time() < start:
        time.sleep(0.001)
    for i in range(n):
        d = root.parent / "work" / f"{tag}-{i}"
        d.mkdir(parents=True)
        (d / "w.bin").write_bytes(f"{tag}/{i}".encode() * 100)
        run = store.create_run({"recipe": "tiny", "stage": "sft", "inputs": {}, "config": {"i": i}})
        art = store.register(d, kind="model", name="tiny/sft/model", run=run)
        store.add_event(run, "outputs", outputs={"model": art})
        store.add_event(run, "status", state="SUCCEEDED")
""")


def test_eight_writers_lose_nothing(tmp_path):
    store = Store.open(tmp_path / "store", create=True)
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store.root), f"w{k}", "10", str(start)])
             for k in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8

    idx = store.index()
    runs = idx.runs()
    assert len(runs) == 80 and {r["state"] for r in runs} == {"SUCCEEDED"}
    versions = idx.db.execute("SELECT version, artifact FROM refs WHERE name='tiny/sft/model'").fetchall()
    assert sorted(v for v, _ in versions) == list(range(1, 81))
    assert len({a for _, a in versions}) == 80
    assert len(idx.artifacts(kind="model")) == 80
    for _, art in versions:
        store.verify(art)
    assert idx.db.execute("SELECT count(*) FROM edges WHERE direction='out'").fetchone()[0] == 80


KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    from lineage import Store
    store = Store(Path(sys.argv[1]))
    store.register(Path(sys.argv[2]), kind="model", name="tiny/pretrain/model")
    print("done", flush=True)
""")


def test_sigkill_during_registration_leaves_nothing_half_made(tmp_path):
    store = Store.open(tmp_path / "store", create=True)
    rng = random.Random(7)

    def checkpoint(name: str) -> Path:
        d = tmp_path / "work" / name
        d.mkdir(parents=True)
        for i in range(24):
            (d / f"shard{i:02d}.bin").write_bytes(os.urandom(1 << 21))
        return d

    # How long one whole registration takes here, start-up included: kills are spread over it.
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", KILLED, str(store.root), str(checkpoint("whole"))], check=True)
    whole = time.monotonic() - t0
    finished = 0
    for attempt in range(12):
        d = checkpoint(f"ckpt{attempt}")
        p = subprocess.Popen([sys.executable, "-c", KILLED, str(store.root), str(d)], stdout=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, whole * 1.1))
        p.send_signal(signal.SIGKILL)
        out = p.communicate()[0]
        finished += b"done" in out

        # Whatever survived is whole: every visible artifact verifies, refs point at visible artifacts.
        records = sorted((store.records / "artifact").rglob("art_*.json"))
        for rec in records:
            store.verify(rec.stem)
            assert len(store.artifact(rec.stem)["manifest"]) == 24
        idx = store.index()
        assert {r["id"] for r in idx.artifacts()} == {r.stem for r in records}
        for (art,) in idx.db.execute("SELECT artifact FROM refs"):
            assert art in {r.stem for r in records}
    assert finished < 12, "every kill came too late to test anything"


def test_sigkill_during_index_sync_leaves_a_working_index(tmp_path):
    store = Store.open(tmp_path / "store", create=True)
    for i in range(3000):
        run = store.create_run({"recipe": "tiny", "stage": "data", "inputs": {}, "config": {"i": i}})
        store.add_event(run, "status", state="SUCCEEDED")
    sync = "import sys; from pathlib import Path; from lineage import Store; Store(Path(sys.argv[1])).index()"
    for delay in (0.2, 0.5, 0.9):
        p = subprocess.Popen([sys.executable, "-c", sync, str(store.root)])
        time.sleep(delay)
        p.kill()
        p.wait()
        assert len(store.index().runs()) == 3000
    incremental = store.index().dump()
    Index(store).rebuild()
    assert Index(store).dump() == incremental
