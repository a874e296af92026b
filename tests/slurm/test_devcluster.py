"""The dev cluster itself: two nodes, accounting, srun across nodes, dependencies that fail fast."""
import subprocess
import time

import pytest

pytestmark = pytest.mark.slurm


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def final_state(job: str, deadline_s: float = 60) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        state = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "State").strip()
        if state and state.split()[0] not in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING"):
            return state.split()[0]
        time.sleep(0.5)
    raise AssertionError(f"job {job} not finished after {deadline_s} s")


def test_two_idle_nodes_and_accounting(slurm_cluster):
    assert sh("sinfo", "-h", "-N", "-o", "%N").split() == ["node1", "node2"]
    job = sh("sbatch", "--parsable", "--output=/dev/null", "--wrap", "true").strip()
    assert final_state(job) == "COMPLETED"
    assert sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "ExitCode").strip() == "0:0"


def test_srun_runs_one_task_per_node(slurm_cluster):
    out = sh("srun", "-N2", "--ntasks-per-node=1", "bash", "-c", "echo $SLURMD_NODENAME")
    assert sorted(out.split()) == ["node1", "node2"]


def test_dependency_on_a_failed_job_is_cancelled_not_pending(slurm_cluster):
    bad = sh("sbatch", "--parsable", "--output=/dev/null", "--wrap", "exit 3").strip()
    child = sh("sbatch", "--parsable", "--output=/dev/null", f"--dependency=afterok:{bad}", "--wrap", "true").strip()
    assert final_state(bad) == "FAILED"
    assert final_state(child) == "CANCELLED"
