"""A `ray: true` stage on the real two-node dev cluster: Ray over both nodes, work on each, nothing left after."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from helpers import ray_pids, run_jobs
from lineage import Store

pytestmark = pytest.mark.slurm
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def env(tmp_path, slurm_cluster) -> dict:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false}\n")
    return {"JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def submit_and_wait(store: Path, env: dict, slurm_cluster, *overrides: str):
    """Submit raytest/probe to Slurm; the run's final view and its job ID, once Slurm says the job ended."""
    r = run_jobs(store, "submit", "raytest", "--stage", "probe", *overrides, "--executor", "slurm",
                 "--profile", "dev", env=env)
    assert r.code == 0, r.err
    (run,) = [line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line]

    def ended():
        run_jobs(store, "status", run, env=env)
        view = Store(store).run(run)
        return view if view.state in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    view = slurm_cluster.wait_until(f"run {run} to end", ended, deadline_s=240, every_s=1)
    job = view.jobs[-1]["job_id"]
    slurm_cluster.final_state(job, deadline_s=90)   # every task (the worker's teardown too) has ended
    return view, job


def test_ray_stage_spans_both_nodes_and_leaves_no_ray_process(tmp_path, env, slurm_cluster):
    store = tmp_path / "store"
    view, job = submit_and_wait(store, env, slurm_cluster)
    assert view.state == "SUCCEEDED", view.reason
    report = json.loads((Path(Store(store).artifact(view.outputs["report"])["path"]) / "report.json").read_text())
    assert sorted(n["name"] for n in report["nodes"]) == ["node1", "node2"]
    assert all(n["cpus"] == 1 for n in report["nodes"])           # cpus_per_task of the stage, per node
    assert report["address"] == report["env_address"]
    assert sorted(t["node"] for t in report["tasks"]) == ["node1", "node1", "node2", "node2"]
    assert sorted(report["actors"]) == ["node1", "node2"]            # actors land on the worker node too
    assert not ray_pids(f"/tmp/ray-{job}-")
    assert not list(Path("/tmp").glob(f"ray-{job}-*"))


def test_ray_not_ready_within_the_deadline_fails_the_run_clearly(tmp_path, env, slurm_cluster):
    store = tmp_path / "store"
    view, job = submit_and_wait(store, {**env, "JOBS_RAY_READY_TIMEOUT_S": "1"}, slurm_cluster)
    assert view.state == "FAILED"
    assert re.search(r"ray: [01] of 2 nodes joined within 1 s \(missing: (node1, )?node2\)", view.reason), view.reason
    status = run_jobs(store, "status", view.id, env=env)
    assert "nodes joined within 1 s" in status.out
    assert not ray_pids(f"/tmp/ray-{job}-")
