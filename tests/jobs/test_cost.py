"""jobs/cost.py: an attempt's queue wait and boot, derived from the store's own records."""
import json
import os
import time
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage.store import Store

from jobs.cost import PHASES, instance_of, parse_usage, usage, waits


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


# ---- what an attempt used ------------------------------------------------------------------------
#: `sacct -n -P -D -j 45,1808 -o USAGE_FIELDS` from the dev cluster (jobacct_gather/none: MaxRSS empty):
#: job 45 requeued twice (each instance followed by its steps), 1808 on two nodes.
SACCT = """\
45|45|REQUEUED|2026-11-28T01:50:05|2026-11-28T01:50:05|2026-11-28T01:50:21|16|billing=1,cpu=1,node=1|
45.batch|45.batch|CANCELLED|2026-11-28T01:50:05|2026-11-28T01:50:05|2026-11-28T01:50:22|17|cpu=1,mem=0,node=1|
45.0|45.0|CANCELLED|2026-11-28T01:50:05|2026-11-28T01:50:05|2026-11-28T01:50:22|17|cpu=1,mem=0,node=1|
45|45|REQUEUED|2026-11-28T01:50:22|2026-11-28T01:50:33|2026-11-28T01:50:51|18|billing=1,cpu=1,node=1|
45.batch|45.batch|CANCELLED|2026-11-28T01:50:33|2026-11-28T01:50:33|2026-11-28T01:50:51|18|cpu=1,mem=0,node=1|
45.0|45.0|CANCELLED|2026-11-28T01:50:34|2026-11-28T01:50:34|2026-11-28T01:50:51|17|cpu=1,mem=0,node=1|
45|45|FAILED|2026-11-28T01:50:51|2026-11-28T01:51:06|2026-11-28T01:51:22|16|billing=1,cpu=1,node=1|
45.batch|45.batch|FAILED|2026-11-28T01:51:06|2026-11-28T01:51:06|2026-11-28T01:51:22|16|cpu=1,mem=0,node=1|
45.0|45.0|FAILED|2026-11-28T01:51:06|2026-11-28T01:51:06|2026-11-28T01:51:22|16|cpu=1,mem=0,node=1|
1808|1808|COMPLETED|2026-11-28T07:25:14|2026-11-28T07:25:14|2026-11-28T07:25:22|8|billing=2,cpu=2,node=2|
1808.batch|1808.batch|COMPLETED|2026-11-28T07:25:14|2026-11-28T07:25:14|2026-11-28T07:25:22|8|cpu=1,mem=0,node=1|
1808.0|1808.0|COMPLETED|2026-11-28T07:25:14|2026-11-28T07:25:14|2026-11-28T07:25:22|8|cpu=2,mem=0,node=2|
"""


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_sacct_usage_per_instance_with_what_the_accounting_lacks_as_not_measured():
    found = parse_usage(SACCT)
    first, second, third = found["45"]
    assert [i["state"] for i in found["45"]] == ["REQUEUED", "REQUEUED", "FAILED"]
    assert second["submit"] == _epoch("2026-11-28T01:50:22") and second["start"] == _epoch("2026-11-28T01:50:33")
    assert second["elapsed_s"] == 18 and second["cpus"] == 1 and second["cpu_hours"] == 18 / 3600
    (two,) = found["1808"]
    assert two["cpus"] == 2 and two["cpu_hours"] == 8 * 2 / 3600
    assert two["gpus"] == 0 and two["gpu_hours"] == 0   # AllocTRES holds no GPU: none allocated
    assert all(i["max_rss_bytes"] is None for i in (first, second, third, two))   # jobacct_gather/none
    assert two["mem_bytes"] is None   # mem=0 is only on the steps' lines: the job's allocation names none


#: The same from the dev cluster on jobacct_gather/linux (every 5 s): job 1883 requeued by hand after
#: 12 s, its steps sampled; the second instance ran 5 s, too short for a sample.
SACCT_SAMPLED = """\
1883|1883|REQUEUED|2026-11-28T08:18:15|2026-11-28T08:18:15|2026-11-28T08:18:27|12|billing=1,cpu=1,node=1|
1883.batch|1883.batch|CANCELLED|2026-11-28T08:18:15|2026-11-28T08:18:15|2026-11-28T08:18:27|12|cpu=1,mem=0,node=1|12176K
1883.0|1883.0|CANCELLED|2026-11-28T08:18:15|2026-11-28T08:18:15|2026-11-28T08:18:32|17|cpu=1,mem=0,node=1|46904K
1883|1883|COMPLETED|2026-11-28T08:18:32|2026-11-28T08:18:43|2026-11-28T08:18:48|5|billing=1,cpu=1,node=1|
1883.batch|1883.batch|COMPLETED|2026-11-28T08:18:43|2026-11-28T08:18:43|2026-11-28T08:18:48|5|cpu=1,mem=0,node=1|
1883.0|1883.0|COMPLETED|2026-11-28T08:18:43|2026-11-28T08:18:43|2026-11-28T08:18:48|5|cpu=1,mem=0,node=1|
"""


def test_max_rss_is_the_largest_of_the_instances_steps_and_none_where_no_step_was_sampled():
    first, second = parse_usage(SACCT_SAMPLED)["1883"]
    assert first["max_rss_bytes"] == 46904 * 1024   # the srun step's, larger than the batch shell's
    assert second["max_rss_bytes"] is None          # not measured, never 0


def test_an_instance_not_yet_ended_is_left_for_later_and_no_earlier_one_stands_in():
    requeued = SACCT.splitlines()[:3]   # job 45's first instance, requeued, and a second one still running
    running = "45|45|RUNNING|2026-11-28T01:50:22|2026-11-28T01:50:33|Unknown|5|billing=1,cpu=1,node=1|"
    instances = parse_usage("\n".join([*requeued, running]))["45"]
    second = {"attempt": 2, "job_id": "45", "batch_start": instances[1]["start"] + 0.4, "end": time.time(), "exit": 0}
    assert instance_of(second, instances) is None
    first = {"attempt": 1, "job_id": "45", "batch_start": instances[0]["start"] + 0.4}
    assert instance_of(first, instances) is instances[0]


def test_each_attempt_of_a_requeued_job_gets_its_own_instance():
    instances = parse_usage(SACCT)["45"]
    for n, inst in enumerate(instances):
        attempt = {"attempt": n + 1, "job_id": "45", "batch_start": inst["start"] + 0.4, "start": inst["start"] + 3}
        assert instance_of(attempt, instances) is inst


def test_recorded_sacct_usage_is_shown_and_its_queue_wait_replaces_the_estimate(tmp_path):
    store, run = _run(tmp_path, "slurm")
    inst = parse_usage(SACCT)["45"][1]
    store.add_event(run, "job", executor="slurm", job_id="45")
    store.add_event(run, "attempt", attempt=1, job_id="45", batch_start=inst["start"] + 0.3, start=inst["start"] + 2)
    store.add_event(run, "attempt", attempt=1, end=inst["start"] + 17, exit=0, usage=inst)
    (w,) = waits(store.run(run))
    assert w["queued"] == inst["start"] - inst["submit"] == 11   # sacct's Submit -> Start, not the job event's time
    r = run_jobs(tmp_path, "show", run)
    assert r.code == 0, r.err
    assert "used      elapsed 18.0 s  cpus 1  gpus 0" in r.out and "max RSS -  (sacct)" in r.out
    doc = json.loads(run_jobs(tmp_path, "show", run, "--json").out)
    assert doc["waited"] == [w]
    (u,) = doc["usage"]
    assert u["source"] == "sacct" and u["elapsed_s"] == 18 and u["max_rss_bytes"] is None and u["cpu_hours"] == 18 / 3600


def test_a_slurm_attempt_without_recorded_accounting_is_not_measured(tmp_path):
    store, run = _run(tmp_path, "slurm")
    inst = parse_usage(SACCT)["1808"][0]
    store.add_event(run, "attempt", attempt=1, job_id="1808", start=inst["start"] + 1)
    store.add_event(run, "attempt", attempt=1, end=inst["start"] + 8, exit="interrupted", usage=inst)
    store.add_event(run, "attempt", attempt=2, job_id="999999", start=time.time())   # running: nothing in sacct yet
    u1, u2 = usage(store.run(run))
    assert u2["source"] is None and u2["elapsed_s"] is None and u2["cpu_hours"] is None
    doc = json.loads(run_jobs(tmp_path, "show", run, "--cost", "--json").out)
    (row,) = doc["runs"]
    assert row["attempts"] == 2 and row["unmeasured"] == 1
    assert row["elapsed_s"] == u1["elapsed_s"] == 8 and row["cpu_hours"] == u1["cpu_hours"]   # the measured one alone
    text = run_jobs(tmp_path, "show", run, "--cost").out
    assert "1 attempt(s) not measured yet" in text


def test_a_local_attempt_uses_its_own_times_and_the_runs_resources(tmp_path):
    store = Store.open(tmp_path, create=True)
    run = store.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": "local", "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {}, "resources": {"nodes": 2, "cpus_per_task": 3, "gpus_per_node": 1},
                            "code": {}, "environment": {}})
    store.add_event(run, "attempt", attempt=1, start=1000.0)
    store.add_event(run, "attempt", attempt=1, end=1360.0, exit=0)
    (u,) = usage(store.run(run))
    assert u["source"] == "local" and u["elapsed_s"] == 360 and (u["cpus"], u["gpus"]) == (6, 2)
    assert u["cpu_hours"] == 0.6 and u["gpu_hours"] == 0.2 and u["max_rss_bytes"] is None


# ---- jobs show ART --cost --------------------------------------------------------------------------
FIXTURES = Path(__file__).parents[1] / "fixtures"
ENV = {"JOBS_RECIPES": str(FIXTURES / "recipes"),
       "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def _recorded(view) -> dict:
    """What a run's records say, summed by hand: attempts, each phase, the attempts' own times."""
    recorded = {p for a in view.attempts for p in a.get("phases") or {}}   # whatever the attempts recorded
    return {"attempts": len(view.attempts),
            "phases": {p: sum(a["phases"][p] for a in view.attempts if p in (a.get("phases") or {})) for p in recorded},
            "elapsed_s": sum(a["end"] - a["start"] for a in view.attempts) if view.attempts else None}


def _cost(store: Path, target: str) -> dict:
    r = run_jobs(store, "show", target, "--cost", "--json", env=ENV)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_cost_sums_the_whole_ancestry_from_the_records_failed_attempts_included(tmp_path):
    store = tmp_path / "store"
    assert run_jobs(store, "submit", "testchain", "--stage", "count,double", env=ENV).code == 0
    failed = run_jobs(store, "submit", "testchain", "--stage", "count,double", "count.fail=true", env=ENV)
    assert failed.code != 0
    s = Store(store)
    runs = {(r["stage"], r["state"]): r["id"] for r in s.index().runs()}
    ok_count, ok_double = runs["count", "SUCCEEDED"], runs["double", "SUCCEEDED"]
    bad_count, bad_double = runs["count", "FAILED"], [r for (st, state), r in runs.items() if st == "double" and state != "SUCCEEDED"][0]

    art = s.run(ok_double).outputs["result"]
    for target, chain in ((art, [ok_count, ok_double]), (bad_double, [bad_count, bad_double])):
        doc = _cost(store, target)
        assert [row["run"] for row in doc["runs"]] == chain   # the producing run and, upstream, its inputs' (oldest first)
        for row in doc["runs"]:
            want = _recorded(s.run(row["run"]))
            assert row["attempts"] == want["attempts"]
            assert {p: v for p, v in row["phases"].items() if v is not None} == want["phases"]
            assert row["elapsed_s"] == pytest.approx(want["elapsed_s"], abs=1e-3) if want["elapsed_s"] is not None \
                else row["elapsed_s"] is None
        tot = doc["total"]
        assert tot["attempts"] == sum(row["attempts"] for row in doc["runs"])
        for p in PHASES:
            known = [row["phases"][p] for row in doc["runs"] if row["phases"][p] is not None]
            assert tot["phases"][p] == (pytest.approx(sum(known)) if known else None)
        assert tot["cpu_hours"] == pytest.approx(sum(row["cpu_hours"] or 0 for row in doc["runs"]))
        assert tot["max_rss_bytes"] is None   # a local run measures no RSS: not measured, never 0
    failed_row = _cost(store, bad_double)["runs"][0]
    assert failed_row["state"] == "FAILED" and failed_row["attempts"] == 1 and failed_row["phases"]["verify"] is not None

    text = run_jobs(store, "show", art, "--cost", env=ENV).out.splitlines()
    assert text[-1].split()[:2] == ["total", "2"] and text[-1].split()[-1] == "-"


@pytest.mark.parametrize("target, message", [
    ("art_zzz", "bad artifact ID"), ("0123abcd", "no run 0123abcd"), ("nosuch:latest", "nosuch"),
])
def test_cost_of_an_unknown_id_is_one_line(tmp_path, target, message):
    store = tmp_path / "store"
    Store.open(store, create=True)
    r = run_jobs(store, "show", target, "--cost", env=ENV)
    assert r.code != 0 and r.out == "" and message in r.err
    assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("jobs: ")
