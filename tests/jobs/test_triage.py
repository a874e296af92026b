"""A failed attempt's class where users read it: `jobs show`, `jobs status`, `jobs list --failed`;
and the retry budget refused at submit, in one line, before anything is written."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from helpers import run_jobs, tree_state
from jobs.triage import local_death
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
ENV = {"JOBS_RECIPES": str(FIXTURES / "recipes"),
       "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def test_failed_runs_carry_their_class_in_show_status_and_list(tmp_path):
    store = tmp_path / "store"
    bug = run_jobs(store, "submit", "testchain", "--stage", "count", "count.fail=true", env=ENV)
    lacks = run_jobs(store, "submit", "testchain", "--stage", "count", "+count.needs=no_such_library_here", env=ENV)
    assert bug.code == 1 and lacks.code == 1, (bug.err, lacks.err)
    runs = {r["id"]: Store(store).run(r["id"]) for r in Store(store).index().runs()}
    by_class = {v.attempts[0]["failure_class"]: v for v in runs.values()}
    assert set(by_class) == {"code_error", "environment"}
    env_run, bug_run = by_class["environment"], by_class["code_error"]
    assert env_run.reason.startswith("environment: ModuleNotFoundError: No module named 'no_such_library_here'")
    assert bug_run.reason == "code_error: RuntimeError: failing on purpose (count.fail=true)"

    shown = run_jobs(store, "show", env_run.id, env=ENV).out
    assert "exit error  class environment  (ModuleNotFoundError: " in shown, shown
    status = run_jobs(store, "status", "--all", env=ENV).out
    assert "attempts: #1 environment" in status and "attempts: #1 code_error" in status, status

    listed = run_jobs(store, "list", "--failed", "environment", env=ENV)
    assert listed.code == 0 and [line.split()[0] for line in listed.out.splitlines()[1:]] == [env_run.id], listed.out
    as_json = json.loads(run_jobs(store, "list", "--failed", "code_error", "--json", env=ENV).out)
    assert [r["id"] for r in as_json] == [bug_run.id]
    none = run_jobs(store, "list", "--failed", "time_limit", env=ENV)
    assert none.code == 0 and len(none.out.splitlines()) == 1   # the header: no run failed so
    before = tree_state(store)
    typo = run_jobs(store, "list", "--failed", "codeerror", env=ENV)
    assert typo.code == 2 and typo.out == "" and len(typo.err.splitlines()) == 1, typo.err
    assert "unknown --failed value 'codeerror' (did you mean code_error?" in typo.err
    assert tree_state(store) == before


def test_a_bad_retry_budget_is_refused_at_submit_in_one_line(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("retrybug: {partition: debug, containers: false, retries: {code_error: 2}}\n"
                        "typo: {partition: debug, containers: false, retries: {preemted: 2}}\n")
    recipes = tmp_path / "recipes"
    shutil.copytree(FIXTURES / "recipes" / "testchain", recipes / "testchain")
    recipe = recipes / "testchain" / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("mem_gb: 1, time_min: 5}", "mem_gb: 1, time_min: 5, retries: {time_limit: 1.5}}", 1))
    store = tmp_path / "store"
    cases = [
        ({"JOBS_PROFILES": str(profiles)}, ["--executor", "slurm", "--profile", "retrybug"],
         "retries cannot retry code_error: a retry would fail the same way"),
        ({"JOBS_PROFILES": str(profiles)}, ["--executor", "slurm", "--profile", "typo"],
         "retries has unknown failure class 'preemted' (did you mean preempted?"),
        ({"JOBS_RECIPES": str(recipes)}, [], "resources.retries time_limit must be a whole number of requeues"),
    ]
    for extra, args, says in cases:
        r = run_jobs(store, "submit", "testchain", "--stage", "count", *args, env={**ENV, **extra})
        assert r.code == 2 and len(r.err.splitlines()) == 1 and r.err.startswith("jobs: ") and says in r.err, r.err
        assert not store.exists()



def test_a_process_killed_by_sigkill_is_out_of_memory_and_one_that_raised_is_not():
    """What a local job's death leaves, from real processes: SIGKILL (the kernel OOM killer's signal)."""
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert local_death(killed.returncode, ()) == \
        ("out_of_memory", "out_of_memory: the job process died before recording an end (signal 9)")
    raised = subprocess.run([sys.executable, "-c", "import no_such_library_here"], capture_output=True, text=True)
    log = tuple(line for line in raised.stderr.splitlines() if line.strip())
    assert local_death(raised.returncode, log)[0] == "environment"
    assert local_death(None, ()) == ("code_error", "code_error: the job process died before recording an end "
                                                   "(nothing it left says why)")


def test_an_end_only_slurm_saw_is_recorded_with_its_class_on_the_run_and_its_open_attempt(tmp_path):
    """`jobs status` reconciles a job Slurm ended past the entry (here its time limit): the run's FAILED
    reason and its open attempt carry the class, so `list --failed time_limit` finds it. The job ID is one
    the dev cluster's sacct has no record of, so squeue's state alone decides, as when sacct lags."""
    from jobs.reconcile import Live, reconcile

    store = Store.open(tmp_path / "store", create=True)
    run = store.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": "slurm", "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
    store.add_event(run, "job", executor="slurm", job_id="987654321")
    store.add_event(run, "attempt", attempt=1, job_id="987654321", start=1.0)
    view = reconcile(store, store.run(run), Live("TIMEOUT", exit_code="0:15"))
    assert view.state == "FAILED" and view.reason == "time_limit: Slurm ended the job: TIMEOUT exit 0:15", view.reason
    assert [(a.get("exit"), a.get("failure_class")) for a in view.attempts] == [("interrupted", "time_limit")]
    listed = run_jobs(tmp_path / "store", "list", "--failed", "time_limit", env=ENV).out.splitlines()
    assert [line.split()[0] for line in listed[1:]] == [run], listed
