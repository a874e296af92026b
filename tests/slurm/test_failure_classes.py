"""Each failed attempt's class on the real dev cluster, and the retry budget that decides a requeue.

Where the host has cgroup v1's memory controller, the dev cluster's `memcap` partition holds a job to
its --mem (task/cgroup, CR_Core_Memory: dev/slurm/up.sh) and Slurm says OUT_OF_MEMORY. What a process
killed by SIGKILL with no Slurm state to explain it leaves (the kernel's OOM killer's way outside a
cgroup) is captured from real jobs too, with the other ends' sacct records; those captures are what
tests/lineage/test_failures.py classifies in milliseconds ($JOBS_CAPTURE_SACCT names a file to write
them to).
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import run_jobs
from jobs.triage import STEP_FIELDS, facts_of
from lineage import Store
from lineage.failures import classify
from runtime.attempts import SACCT_FIELDS
from test_executor import env as env  # noqa: F401  (fixture: profiles and the fixture recipes)
from test_executor import job_of, submit, wait, wait_for_progress

pytestmark = pytest.mark.slurm

#: Plain batch jobs, each ending one way, and the class its sacct record and log must get.
ENDS = {
    "exit 3": (["--wrap", "exit 3"], "code_error"),
    "batch shell SIGKILL": (["--wrap", "kill -9 $$"], "out_of_memory"),
    "srun task SIGKILL": (["--wrap", "srun python3 -c 'import os; os.kill(os.getpid(), 9)'"], "out_of_memory"),
    "import error": (["--wrap", "python3 -c 'import no_such_library_here'"], "environment"),
    "over its cgroup memory": (["--partition=memcap", "--mem=100M", "--wrap",
                                "python3 -c 'x = bytearray(400 << 20); x[::4096] = bytes(len(x[::4096]))'"],
                               "out_of_memory"),
    "time limit": (["--time=1", "--wrap", "sleep 600"], "time_limit"),
    "scontrol requeue": (["--wrap", "sleep 600"], "preempted"),
}


def sacct_of(job: str) -> tuple[str, str]:
    out = [subprocess.run(["sacct", "-n", "-P", *args, "-j", job, "-o", fields], capture_output=True, text=True).stdout
           for args, fields in ((["-X", "-D"], SACCT_FIELDS), ([], STEP_FIELDS))]
    return out[0], out[1]


def test_real_job_ends_are_classified_from_what_sacct_and_the_log_kept(tmp_path, slurm_cluster):
    ends = {case: end for case, end in ENDS.items() if slurm_cluster.holds_memory() or "--partition=memcap" not in end[0]}
    jobs = {case: slurm_cluster.sbatch("--partition=debug", f"--output={tmp_path}/%j.log", f"--chdir={tmp_path}", *args)
            for case, (args, _) in ends.items()}
    requeue = jobs["scontrol requeue"]
    slurm_cluster.wait_until("the requeue case to run", lambda: slurm_cluster.job_field(requeue, "JobState") == "RUNNING",
                             deadline_s=120)
    subprocess.run(["scontrol", "requeue", requeue], check=True)
    # The requeued instance is in sacct as REQUEUED once the job is pending again; then it goes.
    slurm_cluster.wait_until("the requeued instance", lambda: "REQUEUED" in sacct_of(requeue)[0], deadline_s=60)
    subprocess.run(["scancel", requeue], check=True)
    captured = []
    for case, job in jobs.items():
        if job != requeue:   # a time limit of 1 minute: Slurm ends it within about 2
            slurm_cluster.final_state(job, deadline_s=240)
        sacct, steps = sacct_of(job)
        if job == requeue:   # the instance that was requeued, not the cancel after it
            sacct, steps = "".join(line + "\n" for line in sacct.splitlines() if "|REQUEUED|" in line), ""
        log = [line.strip() for line in (tmp_path / f"{job}.log").read_text().splitlines() if line.strip()][-20:]
        captured.append({"case": case, "sacct": sacct, "steps": steps, "log": log})
    if os.environ.get("JOBS_CAPTURE_SACCT"):
        Path(os.environ["JOBS_CAPTURE_SACCT"]).write_text(json.dumps(captured, indent=1) + "\n")
    got = {c["case"]: classify(facts_of(c["sacct"], c["steps"], tuple(c["log"]))) for c in captured}
    assert got == {case: want for case, (_, want) in ends.items()}, captured


def test_a_stage_that_lacks_a_library_or_has_a_bug_fails_once_with_its_class(tmp_path, env):
    store = tmp_path / "store"
    (lacks,) = submit(store, env, "testchain", "--stage", "count", "+count.needs=no_such_library_here", "count.steps=1")
    (bug,) = submit(store, env, "testchain", "--stage", "count", "count.fail=true", "count.steps=2")
    for run, cls, error in ((lacks, "environment", "ModuleNotFoundError"), (bug, "code_error", "RuntimeError")):
        view = wait(store, run, {"SUCCEEDED", "FAILED"}, env=env)
        assert view.state == "FAILED" and view.reason.startswith(f"{cls}: {error}: "), view.reason
        assert [a.get("failure_class") for a in view.attempts] == [cls], view.attempts   # never requeued
        shown = run_jobs(store, "show", run, env=env).out
        assert f"exit error  class {cls}" in shown, shown
        listed = run_jobs(store, "list", "--failed", cls, env=env).out.splitlines()
        assert [line.split()[0] for line in listed[1:]] == [run], listed
    # Slurm ran each once: its accounting has one instance of each job.
    for run in (lacks, bug):
        job = job_of(store, run)
        rows = subprocess.run(["sacct", "-n", "-P", "-X", "-D", "-j", job, "-o", "State"], capture_output=True,
                              text=True).stdout.split()
        assert rows and all(r == "FAILED" for r in rows) and len(rows) == 1, rows


def test_a_time_limit_beyond_the_budget_fails_the_run_as_time_limit(tmp_path, env):
    store = tmp_path / "store"
    profiles = tmp_path / "limit.yaml"
    profiles.write_text("dev: {partition: debug, containers: false, time: '00:01:00', retries: {time_limit: 0}}\n")
    (run,) = submit(store, {**env, "JOBS_PROFILES": str(profiles)}, "testchain", "--stage", "count",
                    "count.steps=400", "count.step_s=0.5")
    assert Store(store).run_spec(run).retries["time_limit"] == 0
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=300, env=env)
    # Either the stage stopped on USR2 and the entry refused the requeue (no budget left), or Slurm
    # killed it at the limit first and `jobs status` classified what sacct said: time_limit both ways.
    assert view.state == "FAILED" and view.reason.startswith("time_limit: "), view.reason
    assert [a.get("failure_class") for a in view.attempts] == ["time_limit"], view.attempts
    if view.attempts[0]["exit"] == "stopped":   # the entry's refusal, naming the class and the count
        assert view.reason == "time_limit: 1 attempt ended so, the retry budget allows 0 requeues (retries.time_limit)"
        assert view.attempts[0]["reason"].endswith("; not requeued (retry budget spent)"), view.attempts[0]
    status = run_jobs(store, "status", run, env=env).out
    assert "attempts: #1 time_limit" in status, status


def test_a_node_set_down_under_the_job_is_a_node_failure_and_the_run_resumes_on_the_other(tmp_path, env, slurm_cluster):
    store = tmp_path / "store"
    profiles = tmp_path / "whole.yaml"
    # The whole node: no one else's job is on the node this test sets down.
    profiles.write_text("dev: {partition: debug, containers: false, exclusive: true, retries: {node_failure: 1}}\n")
    penv = {**env, "JOBS_PROFILES": str(profiles)}
    (run,) = submit(store, penv, "testchain", "--stage", "count", "count.steps=30", "count.step_s=0.5")
    wait_for_progress(store, run, 3)
    node = Store(store).run(run).attempts[0]["nodes"][0]
    try:
        # Drained first: its slurmd lives on here and registers again at once (ReturnToService=2),
        # where a dead node's would not; drained, the requeued job goes to the other node.
        for state in ("drain", "down"):
            subprocess.run(["scontrol", "update", f"nodename={node}", f"state={state}", "reason=jobs node-failure test"],
                           check=True)
        # Requeued, the job pends at least until its old credential expires (AuthInfo cred_expire=10):
        # a `jobs status` then keeps it off the failed node for good, should that node come back.
        job = job_of(store, run)
        slurm_cluster.wait_until("the requeued job to pend", lambda: slurm_cluster.job_field(job, "JobState") == "PENDING",
                                 deadline_s=60)
        assert run_jobs(store, "status", run, env=penv).code == 0
        assert node in slurm_cluster.job_field(job, "ExcNodeList").split(","), slurm_cluster.job_field(job, "ExcNodeList")
        view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=300, env=penv)
    finally:   # ReturnToService=2 may have brought it back already (its slurmd registered again)
        if slurm_cluster.node_states().get(node, "").rstrip("*~#") in ("down", "drain", "drng", "fail"):
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=True)
    assert view.state == "SUCCEEDED", view.reason
    first, last = view.attempts[0], view.attempts[-1]
    assert first["exit"] == "interrupted" and first["failure_class"] == "node_failure", first
    assert last["nodes"][0] != node and last["exit"] == 0, last
    slurm_cluster.wait_until(f"{node} back", lambda: slurm_cluster.node_states().get(node, "").rstrip("*") in
                             ("idle", "mix", "alloc"), deadline_s=60)


def test_a_requeue_by_slurm_beyond_the_budget_fails_the_run_when_the_next_attempt_starts(tmp_path, env):
    store = tmp_path / "store"
    profiles = tmp_path / "once.yaml"
    profiles.write_text("dev: {partition: debug, containers: false, retries: {preempted: 0}}\n")
    penv = {**env, "JOBS_PROFILES": str(profiles)}
    (run,) = submit(store, penv, "testchain", "--stage", "count", "count.steps=30", "count.step_s=0.5")
    wait_for_progress(store, run, 3)
    subprocess.run(["scontrol", "requeue", job_of(store, run)], check=True)
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=180, env=penv)
    assert view.state == "FAILED", view.reason
    assert view.reason == "preempted: 1 attempt ended so, the retry budget allows 0 requeues (retries.preempted)"
    assert [a.get("failure_class") for a in view.attempts] == ["preempted"], view.attempts
    listed = run_jobs(store, "list", "--failed", "preempted", env=penv).out.splitlines()
    assert [line.split()[0] for line in listed[1:]] == [run], listed


def test_a_stage_over_its_memory_is_killed_by_slurm_and_fails_once_as_out_of_memory(tmp_path, env, slurm_cluster):
    if not slurm_cluster.holds_memory():
        pytest.skip("this host has no cgroup v1 memory controller: the dev cluster cannot hold a job to its memory")
    store = tmp_path / "store"
    profiles = tmp_path / "memcap.yaml"
    profiles.write_text("dev: {partition: memcap, containers: false, mem_gb: 0.5}\n")
    penv = {**env, "JOBS_PROFILES": str(profiles)}
    (run,) = submit(store, penv, "testchain", "--stage", "count", "+count.hold_mb=1500", "count.steps=1")
    view = wait(store, run, {"SUCCEEDED", "FAILED"}, deadline_s=180, env=penv)
    assert view.state == "FAILED" and view.reason.startswith("out_of_memory: "), view.reason
    assert [a.get("failure_class") for a in view.attempts] == ["out_of_memory"], view.attempts   # never requeued
    job = job_of(store, run)
    rows = dict(line.split("|", 1) for line in subprocess.run(
        ["sacct", "-n", "-P", "-D", "-j", job, "-o", "JobID,State,ReqMem"], capture_output=True, text=True).stdout.split())
    # The stage's step was killed at the cgroup's limit; the batch step that waited on it failed after.
    assert rows[job] == "FAILED|512M" and rows[f"{job}.0"].startswith("OUT_OF_MEMORY|"), rows
    shown = run_jobs(store, "show", run, env=penv).out
    assert "class out_of_memory" in shown, shown
