"""jobs/cost.py: an attempt's queue wait and boot, derived from the store's own records."""
import time
from pathlib import Path

from helpers import run_jobs
from lineage.store import Store

from jobs.cost import waits


def _run(root: Path, executor: str) -> tuple[Store, str]:
    store = Store.open(root, create=True)
    run = store.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": executor, "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
    return store, run


def test_slurm_attempts_wait_from_their_own_job_event(tmp_path):
    store, run = _run(tmp_path, "slurm")
    store.add_event(run, "job", executor="slurm", job_id="11")
    time.sleep(0.05)
    store.add_event(run, "attempt", attempt=1, job_id="11", batch_start=time.time(), start=time.time() + 0.5)
    store.add_event(run, "attempt", attempt=1, end=time.time() + 1, exit="requeued")
    store.add_event(run, "job", executor="slurm", job_id="12")
    time.sleep(0.05)
    store.add_event(run, "attempt", attempt=2, job_id="12", batch_start=time.time(), start=time.time() + 0.25)
    evs = store.events(run)
    job_t = {e["job_id"]: e["time"] for e in evs if e["kind"] == "job"}
    first = {e["attempt"]: e for e in evs if e["kind"] == "attempt" and "start" in e}
    got = {w["attempt"]: w for w in waits(store.run(run))}
    for n, job in ((1, "11"), (2, "12")):
        assert got[n]["queued"] == round(first[n]["batch_start"] - job_t[job], 3)
        assert got[n]["boot"] == round(first[n]["start"] - first[n]["batch_start"], 3)
    assert got[2]["queued"] < got[1]["queued"] + 1   # the second waits from its own submission, not the first's


def test_local_attempt_waits_from_the_run_creation(tmp_path):
    store, run = _run(tmp_path, "local")
    time.sleep(0.05)
    store.add_event(run, "attempt", attempt=1, start=time.time())
    v = store.run(run)
    (w,) = waits(v)
    assert w["queued"] == round(v.attempts[0]["start"] - v.spec.created, 3) and w["queued"] > 0
    assert w["boot"] is None   # no batch script: nothing between it and the stage entry


def test_an_attempt_that_never_started_has_no_wait(tmp_path):
    store, run = _run(tmp_path, "slurm")
    store.add_event(run, "job", executor="slurm", job_id="7")
    store.add_event(run, "attempt", attempt=1, job_id="7", end=time.time(), exit="error")
    assert waits(store.run(run)) == [{"attempt": 1, "queued": None, "boot": None}]


def test_jobs_show_prints_the_waits(tmp_path):
    store, run = _run(tmp_path, "slurm")
    store.add_event(run, "job", executor="slurm", job_id="11")
    store.add_event(run, "attempt", attempt=1, job_id="11", batch_start=time.time() + 2, start=time.time() + 5)
    (w,) = waits(store.run(run))
    r = run_jobs(tmp_path, "show", run)
    assert r.code == 0, r.err
    assert f"waited    queued {w['queued']:.1f} s  boot {w['boot']:.1f} s" in r.out
