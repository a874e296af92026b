"""The dev cluster itself, against the real daemons: two nodes, accounting, srun across nodes,
dependencies on failed jobs that fail fast, and requeue of a running job."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from devcluster import UP, SlurmCluster, sh

pytestmark = pytest.mark.slurm


def test_sinfo_shows_two_idle_nodes(slurm_cluster: SlurmCluster):
    # Jobs of earlier tests may still be ending: wait for both nodes to be idle, on a deadline.
    try:
        states = slurm_cluster.wait_until(
            "both nodes idle", lambda: (s := slurm_cluster.node_states()) == {"node1": "idle", "node2": "idle"} and s,
            deadline_s=120)
    except AssertionError as e:  # say what holds them
        queue = sh("squeue", "-h", "-o", "%i %j %T %N %M %l").strip() or "empty"
        raise AssertionError(f"{e}: nodes {slurm_cluster.node_states()}, queue: {queue}") from None
    assert states == {"node1": "idle", "node2": "idle"}
    assert sh("sinfo", "-h", "-o", "%P %a").split() == ["debug*", "up", "memcap", "up"]   # memcap: the same nodes, --mem held


def test_sbatch_runs_as_root_writes_its_output_and_sacct_reports_completed(slurm_cluster, tmp_path: Path):
    out = tmp_path / "out.txt"
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", f"--output={out}", "--time=2",
                               "--wrap", 'echo "hello $(id -un) on $SLURMD_NODENAME"')
    assert slurm_cluster.final_state(job) == ("COMPLETED", "0:0")
    assert out.read_text().split()[:2] == ["hello", "root"]
    assert out.read_text().split()[3] in ("node1", "node2")


def test_srun_runs_one_task_on_each_node(slurm_cluster, tmp_path: Path):
    out = sh("srun", f"--chdir={tmp_path}", "-N2", "--ntasks-per-node=1", "--time=1",
             "bash", "-c", 'echo "$SLURMD_NODENAME $SLURM_PROCID"', timeout=120)
    lines = sorted(out.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["node1", "node2"]
    assert sorted(line.split()[1] for line in lines) == ["0", "1"]


def test_dependency_on_a_failed_job_is_cancelled_not_pending(slurm_cluster, tmp_path: Path):
    common = (f"--chdir={tmp_path}", "--output=/dev/null", "--time=1")
    # The parent sleeps a little so that the child is queued while the dependency can still be met.
    bad = slurm_cluster.sbatch(*common, "--wrap", "sleep 1; exit 3")
    child = slurm_cluster.sbatch(*common, f"--dependency=afterok:{bad}", "--wrap", "touch child-ran")
    assert slurm_cluster.final_state(bad) == ("FAILED", "3:0")
    # kill_invalid_depend: cancelled within a scheduling pass or two instead of pending forever.
    state, _ = slurm_cluster.final_state(child, deadline_s=30)
    assert state == "CANCELLED"
    assert slurm_cluster.job_field(child, "Reason") == "DependencyNeverSatisfied"
    assert not (tmp_path / "child-ran").exists()


def test_requeue_of_a_running_job_runs_it_again(slurm_cluster, tmp_path: Path):
    log = tmp_path / "runs.txt"
    # Each run appends its restart count; the first run then waits to be requeued, the second ends.
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
echo "${{SLURM_RESTART_COUNT:-0}}" >> '{log}'
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then sleep 300; fi
""")
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", "--output=/dev/null", "--time=10", "--requeue", str(script))
    slurm_cluster.wait_until("the first run", lambda: log.exists() and log.read_text() == "0\n", deadline_s=60)
    t0 = time.monotonic()
    sh("scontrol", "requeue", job)
    assert slurm_cluster.final_state(job, deadline_s=120) == ("COMPLETED", "0:0")
    restart_s = time.monotonic() - t0
    assert log.read_text().split() == ["0", "1"]
    assert slurm_cluster.job_field(job, "Restarts") == "1"
    # The first attempt stays in accounting as REQUEUED next to the final one.
    history = sh("sacct", "-n", "-X", "-P", "-D", "-j", job, "-o", "State").split()
    assert history == ["REQUEUED", "COMPLETED"]
    # cred_expire=10 and a 2 s scheduler bound the restart (defaults: about 150 s).
    assert restart_s < 60, restart_s


def test_up_cancels_a_job_whose_processes_died_with_a_restart(slurm_cluster, tmp_path: Path):
    # A container restart kills slurmd and the job's slurmstepd; slurmctld keeps the job "running"
    # until its time limit (it held a node through three tests of a CI run). up.sh must end it.
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", "--output=/dev/null", "--time=30", "-w", "node1",
                               "--wrap", "sleep 613")
    slurm_cluster.wait_until("the job to run", lambda: slurm_cluster.sacct(job)[:1] == ["RUNNING"], deadline_s=60)
    slurm_cluster.wait_until("its slurmstepd", lambda: subprocess.run(
        ["pgrep", "-f", rf"^slurmstepd: \[{job}\.batch"], capture_output=True).returncode == 0, deadline_s=30)
    for pattern in ("^slurmd -N node1", rf"^slurmstepd: \[{job}\.", "^sleep 613$"):
        subprocess.run(["pkill", "-9", "-f", pattern], check=False)
    time.sleep(1)
    assert slurm_cluster.sacct(job)[:1] == ["RUNNING"]  # slurmctld has not noticed
    p = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"cancelling job {job}" in p.stdout
    assert slurm_cluster.final_state(job)[0] == "CANCELLED"
    slurm_cluster.wait_until("node1 idle", lambda: slurm_cluster.node_states().get("node1") == "idle", deadline_s=60)
