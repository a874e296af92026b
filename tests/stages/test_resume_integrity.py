"""Resume integrity: SFT, RM, DPO and GRPO stopped mid-way (as on Slurm's signal) and resumed end
with the bytes of an uninterrupted run; a checkpoint of another run, config or inputs, an unreadable
one, or one that would train zero steps of an unfinished run is refused in one line naming the file.

The stages run for real on the data stage's output, from a briefly pretrained model, with few steps
(what the model learns does not matter here, only that two paths give the same bytes). The RL
stages run their actors in the stage's process (rl.cluster.actors=local): resuming is the trainer's
checkpoint, the same with Ray actors; tests/slurm/test_rl_preemption.py resumes GRPO on Ray.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import recipes
from stages.contract import Distributed, Requeue, StageContext
from lineage import Store

pytestmark = pytest.mark.slow
QUIET = ["tracking.wandb=disabled", "tracking.tensorboard=false"]
SFT = ["sft.steps=8", "sft.warmup=2", "sft.batch_size=32", "sft.checkpoint_every=100", "sft.log_every=2"]
RM = ["rm.steps=6", "rm.warmup=2", "rm.batch_size=16", "rm.held_out=0.02", "rm.checkpoint_every=100", "rm.log_every=2"]
RL = ["rl.grpo.num_prompts_per_step=8", "rl.grpo.num_generations_per_prompt=4", "rl.grpo.val_period=100",
      "rl.grpo.max_val_samples=8", "rl.policy.warmup=1", "rl.checkpointing.save_period=100",
      "rl.cluster.threads=1", "rl.cluster.actors=local"]
GRPO = [*RL, "rl.grpo.max_num_steps=3"]
DPO = [*RL, "rl.algorithm=dpo", "rl.dpo.max_num_steps=3", "rl.dpo.pairs=offline", "rl.dpo.num_pairs_per_step=16"]


def context(stage: str, overrides: list[str], inputs: dict, run_dir: Path, *, run_id: str = "run-a",
            attempt: int = 1, stop_at: int | None = None, input_ids: dict | None = None,
            ray_address: str | None = None) -> StageContext:
    """A context whose should_stop() turns true before step `stop_at` runs (it is asked once a step)."""
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return stop_at is not None and calls["n"] == stop_at + 1

    run_dir.mkdir(parents=True, exist_ok=True)
    config = recipes.compose(recipes.load("tiny"), stage, [*QUIET, *overrides])
    return StageContext(run_id=run_id, recipe="tiny", stage=stage, config=config, inputs=dict(inputs),
                        run_dir=run_dir, attempt=attempt, should_stop=should_stop, dist=Distributed(),
                        input_ids=input_ids if input_ids is not None else {k: f"art_{k}" for k in inputs},
                        ray_address=ray_address)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def data(data_store) -> dict[str, Path]:
    store = Store(data_store)
    return {role: Path(store.artifact(store.resolve_artifact(f"tiny/data/{role}:latest"))["path"])
            for role in ("corpus", "tokenizer", "sft", "prefs", "rl")}


@pytest.fixture(scope="module")
def base(data, tmp_path_factory) -> Path:
    """A model pretrained for 3 steps: the starting point of every stage below."""
    from stages import pretrain

    ctx = context("pretrain", ["pretrain.steps=3", "pretrain.warmup=1"],
                  {"corpus": data["corpus"], "tokenizer": data["tokenizer"]}, tmp_path_factory.mktemp("base"))
    return pretrain.run(ctx)["model"]


def stopped_and_resumed(module, stage: str, overrides: list[str], inputs: dict, tmp_path: Path, stop_at: int,
                        output: str, name: str, **kw) -> tuple[Path, Path, dict]:
    """(uninterrupted output, resumed output, the checkpoint the stop left)."""
    import torch

    whole = module.run(context(stage, overrides, inputs, tmp_path / "whole", **kw))[output]
    with pytest.raises(Requeue):
        module.run(context(stage, overrides, inputs, tmp_path / "cut", stop_at=stop_at, **kw))
    ckpt = torch.load(tmp_path / "cut" / "checkpoints" / f"{name}.pt", weights_only=False)
    assert not (tmp_path / "cut" / "outputs").exists()
    resumed = module.run(context(stage, overrides, inputs, tmp_path / "cut", attempt=2, **kw))[output]
    return whole, resumed, ckpt


def resumed_from(run_dir: Path, key: str) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in rows if key in r]


def test_sft_resumes_to_bit_identical_weights_and_refuses_foreign_checkpoints(data, base, tmp_path):
    from stages import sft
    from stages.ml.loop import ResumeRefused

    inputs = {"model": base, "data": data["sft"]}
    whole, resumed, ckpt = stopped_and_resumed(sft, "sft", SFT, inputs, tmp_path, 5, "model", "sft")
    ctx = context("sft", SFT, inputs, tmp_path / "x")
    assert (ckpt["step"], ckpt["run_id"], ckpt["inputs"]) == (5, "run-a", {"model": "art_model", "data": "art_data"})
    assert ckpt["config_digest"] == ctx.config_digest and ckpt["config_digest"].startswith("sha256:")
    assert files(whole) == files(resumed) and files(whole)["model.safetensors"] != files(base)["model.safetensors"]
    assert resumed_from(tmp_path / "cut", "sft/resumed_from") == [5]

    def refused(run_dir: Path, overrides=SFT, **kw) -> str:
        with pytest.raises(ResumeRefused) as e:
            sft.run(context("sft", overrides, inputs, run_dir, attempt=2, **kw))
        msg = str(e.value)
        assert "\n" not in msg and str(run_dir / "checkpoints" / "sft.pt") in msg, msg
        assert not (run_dir / "outputs").exists()
        return msg

    def planted(name: str, edit=None, raw: bytes | None = None) -> Path:
        """A run folder holding the cut run's checkpoint (copied, as a user might), optionally edited."""
        import torch

        run_dir = tmp_path / name
        (run_dir / "checkpoints").mkdir(parents=True)
        target = run_dir / "checkpoints" / "sft.pt"
        if raw is not None:
            target.write_bytes(raw)
        elif edit is None:
            shutil.copy(tmp_path / "cut" / "checkpoints" / "sft.pt", target)
        else:
            state = dict(ckpt)
            edit(state)
            torch.save(state, target)
        return run_dir

    assert "belongs to run run-a, not to this run run-b" in refused(planted("other-run"), run_id="run-b")
    assert "another config" in refused(planted("other-config"), overrides=[*SFT, "sft.lr=0.0005"])
    assert "other inputs (role data)" in refused(planted("other-inputs"),
                                                input_ids={"model": "art_model", "data": "art_other"})
    assert "is at step 8 of 8: resuming would train nothing" in refused(planted("done", lambda s: s.update(step=8)))
    assert "is at step 12 of 8" in refused(planted("beyond", lambda s: s.update(step=12)))
    assert "no valid step (-3)" in refused(planted("negative", lambda s: s.update(step=-3)))
    assert "no valid step ('5')" in refused(planted("text-step", lambda s: s.update(step="5")))
    assert "names no run" in refused(planted("legacy", lambda s: s.pop("run_id")))
    assert "cannot be read" in refused(planted("garbage", raw=b"\x00not a checkpoint\n" * 8))


def test_rm_resumes_to_bit_identical_weights(data, base, tmp_path):
    from stages import rm

    inputs = {"model": base, "data": data["prefs"]}
    whole, resumed, ckpt = stopped_and_resumed(rm, "rm", RM, inputs, tmp_path, 3, "reward_model", "rm")
    assert ckpt["step"] == 3 and ckpt["run_id"] == "run-a"
    assert files(whole) == files(resumed) and {"model.safetensors", "reward_head.safetensors"} <= set(files(whole))


@pytest.fixture(scope="module")
def reward_model(data, base, tmp_path_factory) -> Path:
    """A reward model trained 2 steps: GRPO's reward. The barely trained policy gets every verifier
    answer wrong (no advantage, no update); the reward model's scores differ within every group."""
    from stages import rm

    ctx = context("rm", ["rm.steps=2", "rm.warmup=1", "rm.batch_size=16", "rm.held_out=0.02"],
                  {"model": base, "data": data["prefs"]}, tmp_path_factory.mktemp("rm"))
    return rm.run(ctx)["reward_model"]


def rl_inputs(data: dict, base: Path, reward_model: Path | None = None) -> dict:
    # DPO on offline pairs never loads the reward model: any model folder is carried.
    return {"policy": base, "prompts": data["rl"], "prefs": data["prefs"], "reward_model": reward_model or base}


def test_grpo_resumes_to_bit_identical_weights(data, base, reward_model, tmp_path):
    from stages import rl

    whole, resumed, ckpt = stopped_and_resumed(rl, "rl", [*GRPO, "rl.reward.kind=reward_model"],
                                               rl_inputs(data, base, reward_model), tmp_path, 2, "model", "rl")
    assert ckpt["step"] == 2 and ckpt["run_id"] == "run-a" and set(ckpt["inputs"]) == {"policy", "prompts", "prefs", "reward_model"}
    assert files(whole) == files(resumed)
    assert files(whole)["model.safetensors"] != files(base)["model.safetensors"]    # GRPO did change the weights
    assert resumed_from(tmp_path / "cut", "rl/resumed_from") == [2]


def test_actors_in_process_write_the_bytes_ray_actors_write(data, base, reward_model, tmp_path):
    """GRPO on the reward model, its rollout, reward and trainer actors on a local Ray cluster (the
    recipe's default) and in the stage's process (rl.cluster.actors=local, as every RL test here and
    tests/stages/test_rl.py's methods run them): the same weights, byte for byte."""
    from stages import rl

    inputs = rl_inputs(data, base, reward_model)
    overrides = [*GRPO, "rl.reward.kind=reward_model"]
    local = rl.run(context("rl", overrides, inputs, tmp_path / "local"))["model"]
    on_ray = rl.run(context("rl", [*overrides, "rl.cluster.actors=ray"], inputs, tmp_path / "ray"))["model"]
    assert files(on_ray) == files(local)
    assert files(local)["model.safetensors"] != files(base)["model.safetensors"]


def test_dpo_resumes_to_bit_identical_weights_and_refuses_another_runs_checkpoint(data, base, tmp_path):
    from stages import rl
    from stages.ml.loop import ResumeRefused

    inputs = rl_inputs(data, base)
    whole, resumed, ckpt = stopped_and_resumed(rl, "rl", DPO, inputs, tmp_path, 2, "model", "rl")
    assert ckpt["step"] == 2
    assert files(whole) == files(resumed)
    assert files(whole)["model.safetensors"] != files(base)["model.safetensors"]
    # The trainer's checkpoint copied into another run: refused in one line before any step.
    other = tmp_path / "other" / "checkpoints"
    other.mkdir(parents=True)
    shutil.copy(tmp_path / "cut" / "checkpoints" / "rl.pt", other / "rl.pt")
    with pytest.raises(ResumeRefused) as e:
        rl.run(context("rl", DPO, inputs, tmp_path / "other", run_id="run-b"))
    assert "\n" not in str(e.value) and f"checkpoint {other / 'rl.pt'} belongs to run run-a" in str(e.value)
    assert not (tmp_path / "other" / "outputs").exists()


def test_one_run_one_story_two_attempts_one_wandb_run_one_tensorboard(tmp_path, monkeypatch):
    """A recorded pretrain run executed as a job would be (runtime.entry.execute), stopped before step 6
    and executed again: two attempts in the record and in `jobs show`, each with its own log folder,
    both writing offline W&B files of the same W&B run ID and event files in one TensorBoard folder.
    The job inherits the W&B service of the process that submitted it (sbatch exports the submit
    environment), whose socket is not there: the job's W&B starts its own."""
    from helpers import run_jobs
    from runtime.entry import execute
    from jobs.plan import make_plan
    from jobs.record import record
    from jobs.provenance import CodeChanged
    from stages.ml.tracking import wandb_run_id

    root = tmp_path / "store"
    r = run_jobs(root, "submit", "tiny", "--stage", "data", "data.n_corpus_lines=2000", "data.n_sft=100",
                 "data.n_prefs=100", "data.n_rl=100", "data.n_eval=50", "data.n_rl_val=20")
    assert r.code == 0, r.err
    store = Store(root)
    for tries in range(5):  # the snapshot refuses code that changes under it (others editing the checkout)
        plan = make_plan(store, "tiny", "pretrain", overrides=["pretrain.steps=12", "pretrain.warmup=2", "pretrain.log_every=2",
                                                               "pretrain.checkpoint_every=100", "tracking.wandb=offline"])
        try:
            (run,) = record(store, plan)
            break
        except CodeChanged:
            assert tries < 4
    asked = {"n": 0}
    monkeypatch.setenv("WANDB_SERVICE", f"3-1-unix-{tmp_path / 'gone' / 'socket'}")   # wandb's own format

    def stop_before_step_6() -> bool:
        asked["n"] += 1
        return asked["n"] == 7

    with pytest.raises(Requeue):
        execute(str(root), run, stop_before_step_6)
    assert store.run(run).state == "QUEUED"
    assert execute(str(root), run)["model"].startswith("art_")

    view = store.run(run)
    wid = wandb_run_id(run)
    assert view.state == "SUCCEEDED" and [a["exit"] for a in view.attempts] == ["requeued", 0]
    assert view.attempts[0]["reason"] == "asked to stop; requeued" and view.trackers["wandb_run_id"] == wid
    run_dir = store.run_dir(run)
    for n in (1, 2):
        (offline,) = (run_dir / "attempts" / str(n) / "wandb").glob("offline-run-*")
        assert offline.name.endswith(f"-{wid}") and (offline / f"run-{wid}.wandb").stat().st_size > 0
        meta = json.loads((run_dir / "attempts" / str(n) / "attempt.json").read_text())
        assert (meta["attempt"], meta["wandb_run_id"]) == (n, wid)
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2
    # Where each attempt's time went inside the stage: the first trained and saved at the stop, the second
    # also loaded that checkpoint; the stage's own phases fit inside the stage's time.
    first, second = (a["phases"] for a in view.attempts)
    assert "stage.load" not in first and first["stage.train"] > 0 and first["stage.save"] > 0, first
    assert all(second[k] > 0 for k in ("stage.load", "stage.train", "stage.save")), second
    for ph in (first, second):
        assert sum(v for k, v in ph.items() if k.startswith("stage.")) <= ph["stage"], ph
    assert not (run_dir / "wandb").exists()
    shown = run_jobs(root, "show", run)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert f"attempts  2   one W&B run {wid}" in lines
    attempts = [line for line in lines if line.startswith("attempt   #")]
    assert len(attempts) == 2 and "exit requeued  class preempted  (asked to stop; requeued)" in attempts[0] and "exit 0" in attempts[1]
