"""The rl stage as a two-node Slurm job: Ray over node1 and node2, a rollout worker on each, the
policy trained and registered, and no Ray process left when the job ends. The same job preempted
with USR2 mid-way checkpoints, requeues under the same run ID with a new Ray cluster over the same
nodes, resumes at the saved step, and registers the same artifact as the uninterrupted run.
`jobs show` tells the story: two attempts, why the first ended, one W&B run."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import ray_pids, run_jobs
from lineage import Store
from test_executor import wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
# Two rollout workers (one per node) and one torch thread per actor: the same arithmetic wherever
# Ray places the trainer, so both runs can end with the same bytes. The barely trained policy gets
# every verifier answer wrong (no advantage, no update: the output would equal the input); the
# reward model's scores differ within every group, so every step trains.
RL = ["rl.reward.kind=reward_model", "rl.grpo.max_num_steps=8", "rl.grpo.num_prompts_per_step=8", "rl.grpo.num_generations_per_prompt=4",
      "rl.grpo.val_period=100", "rl.grpo.max_val_samples=8", "rl.cluster.rollout_workers=2", "rl.cluster.threads=1",
      "rl.checkpointing.save_period=100", "tracking.wandb=offline", "tracking.tensorboard=true"]


def steps_done(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    return max([json.loads(line)["step"] for line in path.read_text().splitlines() if "rl/step_time_s" in line] or [0])


def usr2_pending(pid: int) -> bool:
    """Whether USR2 waits in the process's shared pending set (a kill() to a stopped process)."""
    status = Path(f"/proc/{pid}/status").read_text()
    pending = int(next(line.split()[1] for line in status.splitlines() if line.startswith("ShdPnd:")), 16)
    return bool(pending >> (signal.SIGUSR2 - 1) & 1)


def test_two_node_grpo_spreads_rollout_workers_cleans_up_and_a_preempted_one_ends_with_the_same_artifact(
        tmp_path, upstream_store, slurm_cluster):
    store_path = upstream_store
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("two: {partition: debug, containers: false, nodes: 2, cpus_per_task: 2}\n")
    env = {"JOBS_PROFILES": str(profiles)}
    store = Store(store_path)

    def submit(*extra: str) -> str:
        r = run_jobs(store_path, "submit", "tiny", "--stage", "rl", "--executor", "slurm", "--profile", "two",
                     *RL, *extra, env=env)
        assert r.code == 0, r.err
        return store.index().runs(stage="rl")[0]["id"]

    # The uninterrupted run.
    whole = wait(store_path, submit(), {"SUCCEEDED", "FAILED"}, deadline_s=900, env=env)
    assert whole.state == "SUCCEEDED", whole.reason
    assert len(whole.attempts) == 1 and whole.attempts[0]["nodes"] == ["node1", "node2"]
    assert whole.metrics["rl/ray_nodes"] == 2 and whole.metrics["rl/rollout_workers"] == 2
    steps = [json.loads(line) for line in (store.run_dir(whole.id) / "metrics.jsonl").read_text().splitlines()
             if "rl/step_time_s" in line]
    assert [s["step"] for s in steps] == list(range(1, 9)) and all(s["rl/generated_tokens"] > 0 for s in steps)
    model = Path(store.artifact(whole.outputs["model"])["path"])
    assert (model / "model.safetensors").is_file() and store.artifact(whole.outputs["model"])["kind"] == "model"
    slurm_cluster.final_state(whole.jobs[-1]["job_id"], deadline_s=90)
    assert not ray_pids(f"/tmp/ray-{whole.jobs[-1]['job_id']}-")   # nothing of Ray outlives the job

    # The same job (--force: the record would reuse the first), preempted after two steps.
    run = submit("--force")
    assert run != whole.id
    job = store.run(run).jobs[-1]["job_id"]
    deadline = time.monotonic() + 600
    while steps_done(store.run_dir(run)) < 2:
        assert time.monotonic() < deadline, "no GRPO step in 600 s"
        assert store.run(run).state in ("QUEUED", "RUNNING"), store.run(run).reason
        time.sleep(0.05)
    # A step takes ~70 ms on an idle host: the job could end before Slurm's signal reaches it. The
    # driver (the attempt's recorded PID) is frozen until USR2 is pending in it, so the signal lands
    # mid-run however fast the host; the stage thread then stops at its next step.
    driver = store.run(run).attempts[-1]["pid"]
    os.kill(driver, signal.SIGSTOP)
    try:
        subprocess.run(["scancel", "--signal=USR2", job], check=True)     # what Slurm sends on preemption
        slurm_cluster.wait_until("USR2 pending in the driver", lambda: usr2_pending(driver), deadline_s=60)
    finally:
        os.kill(driver, signal.SIGCONT)
    view = wait(store_path, run, {"SUCCEEDED", "FAILED"}, deadline_s=900, env=env)
    assert view.state == "SUCCEEDED", view.reason

    assert [a["exit"] for a in view.attempts] == ["requeued", 0]
    assert {a["job_id"] for a in view.attempts} == {job}
    assert all(a["nodes"] == ["node1", "node2"] for a in view.attempts)
    assert view.attempts[0]["reason"].startswith("preempted (USR2 with time left)")
    assert view.metrics["rl/ray_nodes"] == 2                       # the second attempt's Ray spans both nodes again
    lines = (store.run_dir(run) / "metrics.jsonl").read_text().splitlines()
    saved = [json.loads(line)["rl/resumed_from"] for line in lines if "rl/resumed_from" in line]
    assert len(saved) == 1 and 2 <= saved[0] < 8                   # resumed mid-way, not restarted
    assert view.outputs["model"] == whole.outputs["model"]          # the uninterrupted run's artifact
    assert whole.outputs["model"] != whole.inputs["policy"]         # ... and GRPO changed the weights

    wid = view.trackers["wandb_run_id"]
    for n in (1, 2):
        (offline,) = (store.run_dir(run) / "attempts" / str(n) / "wandb").glob("offline-run-*")
        assert (offline / f"run-{wid}.wandb").is_file()
    shown = run_jobs(store_path, "show", run, env=env)
    assert shown.code == 0 and f"attempts  2   one W&B run {wid}" in shown.out, shown.out + shown.err
    print(shown.out)
    slurm_cluster.final_state(job, deadline_s=90)
    assert not ray_pids(f"/tmp/ray-{job}-")
