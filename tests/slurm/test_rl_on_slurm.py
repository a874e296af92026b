"""The rl stage as a two-node Slurm job: Ray over node1 and node2, a rollout worker on each, the
policy trained and registered, and no Ray process left when the job ends."""
import json
from pathlib import Path

import pytest

from helpers import ray_pids, run_jobs
from lineage import Store
from test_executor import wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_grpo_on_two_slurm_nodes_spreads_rollout_workers_and_cleans_up(tmp_path, upstream_store, slurm_cluster):
    store_path = upstream_store
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("two: {partition: debug, containers: false, nodes: 2, cpus_per_task: 2}\n")
    env = {"JOBS_PROFILES": str(profiles)}
    r = run_jobs(store_path, "submit", "tiny", "--stage", "rl", "--executor", "slurm", "--profile", "two",
                 "rl.grpo.max_num_steps=3", "rl.grpo.num_prompts_per_step=8", "rl.grpo.val_period=3",
                 "rl.grpo.max_val_samples=16", "rl.cluster.rollout_workers=2", "tracking.wandb=disabled",
                 "tracking.tensorboard=false", env=env)
    assert r.code == 0, r.err
    store = Store(store_path)
    run = store.index().runs(stage="rl")[0]["id"]
    view = wait(store_path, run, {"SUCCEEDED", "FAILED"}, deadline_s=900, env=env)
    assert view.state == "SUCCEEDED", view.reason
    assert view.attempts[0]["nodes"] == ["node1", "node2"]
    assert view.metrics["rl/ray_nodes"] == 2 and view.metrics["rl/rollout_workers"] == 2
    steps = [json.loads(line) for line in (store.run_dir(run) / "metrics.jsonl").read_text().splitlines()
             if "rl/step_time_s" in line]
    assert [s["step"] for s in steps] == [1, 2, 3] and all(s["rl/generated_tokens"] > 0 for s in steps)
    model = Path(store.artifact(view.outputs["model"])["path"])
    assert (model / "model.safetensors").is_file() and store.artifact(view.outputs["model"])["kind"] == "model"
    slurm_cluster.final_state(view.jobs[-1]["job_id"], deadline_s=90)
    assert not ray_pids(f"/tmp/ray-{view.jobs[-1]['job_id']}-")
