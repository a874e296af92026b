"""The rl stage's pieces that need no Ray cluster: config checks, sharding, packing, pairs, rewards,
the NeMo RL seam (rendered, never run here), and bad config refused by `jobs submit` itself."""
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from jobs import recipes
from stages.backends import nemo_rl
from stages.ml.policy import pack
from stages.ml.rewards import RewardWorker, below_non_answers, verify
from stages import rm
from stages.rl import _offline_pairs, _on_policy_pairs, check_config, shards


def tiny_rl(*overrides: str) -> dict:
    return recipes.compose(recipes.load("tiny"), "rl", list(overrides))


def test_the_tiny_config_is_valid_and_every_problem_is_reported_at_once():
    assert check_config(tiny_rl()) == []
    problems = check_config(tiny_rl("rl.algorithm=ppo", "rl.generation.backend=sglang",
                                    "rl.grpo.num_generations_per_prompt=1", "rl.cluster.rollout_workers=0"))
    assert len(problems) == 4 and "rl.algorithm must be grpo or dpo (got 'ppo')" in problems


@pytest.mark.parametrize("override,message", [
    ("rl.algorithm=ppo", "rl.algorithm must be grpo or dpo (got 'ppo')"),
    ("~rl.dpo", "rl.dpo is missing"),
    ("rl.grpo.num_prompts_per_step=abc", "rl.grpo.num_prompts_per_step must be an integer in [1, 1048576] (got 'abc')"),
    ("rl.dpo.pair_kinds=[]", "rl.dpo.pair_kinds must be a non-empty list of pair kinds, or null for all (got [])"),
    ("rl.generation.min_new_tokens=6", "rl.generation.min_new_tokens 6 exceeds rl.generation.max_new_tokens 5"),
])
def test_bad_rl_config_is_refused_by_submit_before_anything_is_recorded(tmp_path, override, message):
    store = tmp_path / "store"
    before = tree_digest(store)
    r = run_jobs(store, "submit", "tiny", "--stage", "all", override)
    assert r.code == 2
    assert r.err.strip().splitlines() == [f"jobs: error: tiny/rl: {message}"]
    assert tree_digest(store) == before


def test_offline_pairs_keep_the_kinds_asked_for_and_refuse_to_keep_none(tmp_path):
    import json

    rows = [{"prompt": f"{i}+1=", "chosen": "x", "rejected": "y", "kind": k} for i, k in enumerate(["sum", "style"] * 3)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _offline_pairs(tmp_path, None) == rows
    assert [r["prompt"] for r in _offline_pairs(tmp_path, ["sum"])] == ["0+1=", "2+1=", "4+1="]
    with pytest.raises(ValueError, match=r"pair_kinds \['sums'\] keeps none of the 6 pairs \(their kinds: style, sum\)"):
        _offline_pairs(tmp_path, ["sums"])


def test_shards_keep_order_and_cover_everything():
    items = list(range(10))
    parts = shards(items, 3)
    assert parts == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert shards([1], 3) == [[1], [], []]


def test_pack_masks_exactly_the_response_tokens_aligned_with_the_targets():
    ids, attn, mask = pack([[1, 5, 6], [1, 7]], [[8, 2], [9, 9, 2]], pad_id=0)
    assert ids.tolist() == [[1, 5, 6, 8, 2], [1, 7, 9, 9, 2]]
    assert attn.tolist() == [[1] * 5, [1] * 5]
    # mask[:, t] says whether ids[:, t + 1] is a response token
    assert mask.tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    ids, attn, mask = pack([[1, 5]], [[2]], pad_id=0)
    assert mask.tolist() == [[0, 1]]


def test_on_policy_pairs_take_best_and_worst_and_skip_ties():
    groups = [[[10], [11], [12]], [[20], [21], [22]]]
    prompts, chosen, rejected = _on_policy_pairs([4, 7], [[i] for i in range(10)], groups,
                                                 [0.0, 1.0, 0.0, 1.0, 1.0, 1.0], 3)
    assert prompts == [[4]] and chosen == [[11]] and rejected == [[10]]


def test_verifier_is_exact_match_after_strip():
    assert verify(" 68", "68") == 1.0 and verify("68 ", "68") == 1.0
    assert verify("6", "68") == 0.0 and verify("680", "68") == 0.0 and verify("", "68") == 0.0


def test_reward_model_rewards_put_every_non_answer_below_every_answer():
    """What keeps GRPO from farming a reward model on text it never saw (stages/ml/rewards.py)."""
    assert below_non_answers([3.0, 87.0, -8.0, 5.0], [True, False, True, False]) == [3.0, -9.0, -8.0, -9.0]
    assert below_non_answers([1.0, 2.0], [False, False]) == [0.0, 0.0]   # no answer: no preference


def test_the_reward_model_worker_floors_run_ons_and_non_numbers(pipeline):
    from helpers import artifact_path, latest

    folder = artifact_path(pipeline, latest(pipeline, "rm").outputs["reward_model"])
    read = []   # the rows of each batch the reward model reads

    def counted(model, tokenizer, prompts, responses):
        read.append(list(zip(prompts, responses)))
        return rm.score(model, tokenizer, prompts, responses)

    scorer = dict(load=rm.load_reward_model, score=counted)
    worker = RewardWorker("reward_model", str(folder), threads=1, answer_pattern="[0-9]+", **scorer)
    prompts = ["27+45="] * 4
    scores = worker.score(prompts, ["72", "7 072", "72", "62"], ["72"] * 4, [True, True, False, True])
    assert scores[1] == scores[2] < min(scores[0], scores[3])   # not a number; cut off before <eos>
    assert read == [[("27+45=", "72"), ("27+45=", "62")]]      # only the answers, each once
    raw = RewardWorker("reward_model", str(folder), threads=1, **scorer).score(prompts, [" 72", "7 072", "72", "62"], ["72"] * 4)
    # No answer format: the model's own scores, one per distinct (prompt, stripped response): in
    # another batch than above, hence rounding.
    assert read[1] == [("27+45=", "72"), ("27+45=", "7 072"), ("27+45=", "62")]
    assert raw[0] == raw[2] and abs(raw[0] - scores[0]) < 1e-4 and abs(raw[3] - scores[3]) < 1e-4
    # A GRPO batch: eight samples of each prompt, mostly repeats, scored as the whole batch is.
    batch_p = [f"{a}+{b}=" for a, b in ((27, 45), (3, 9), (50, 49)) for _ in range(8)]
    batch_r = [str(s) for s in (72, 62, 72, 72, 82, 72, 62, 72, 12, 12, 2, 12, 12, 12, 13, 12, 99, 99, 99, 99, 98, 99, 99, 99)]
    whole = rm.score(worker.model, worker.tokenizer, batch_p, batch_r).tolist()
    assert max(abs(a - b) for a, b in zip(worker.score(batch_p, batch_r, ["0"] * 24), whole)) < 1e-4
    assert len(read[-1]) == 8


def test_nano3_rl_becomes_a_nemo_rl_config_with_the_allocation_and_inputs(tmp_path):
    nano3 = recipes.load("nano3")
    cfg = recipes.compose(nano3, "rl", [])
    rl = cfg["rl"]
    assert rl["backend"] == "nemo_rl" and check_config(cfg, resources=nano3.stage("rl").resources) == []
    drv, out = nemo_rl.translate(rl, policy=Path("/store/sft"), prompts=Path("/store/prompts"), prefs=Path("/store/prefs"),
                                 reward_model=Path("/store/rm"), nodes=8, gpus_per_node=8, run_dir=tmp_path, wandb="offline")
    assert "backend" not in out and "algorithm" not in out and "dpo" not in out
    assert out["defaults"] == "/opt/nemo-rl/examples/configs/grpo_math_1B.yaml"   # NeMo RL fills the rest from it
    assert out["cluster"] == {"num_nodes": 8, "gpus_per_node": 8}
    assert out["policy"]["model_name"] == "/store/sft" and out["policy"]["tokenizer"]["name"] == "/store/sft"
    assert set(out["env"]) == {"math"}                 # run_grpo_math.py scores every prompt with it
    assert out["data"]["train_data_path"] == "/store/prompts/train.jsonl" and out["data"]["dataset_name"] == "ResponseDataset"
    assert out["checkpointing"]["checkpoint_dir"] == str(tmp_path / "checkpoints" / "nemo_rl")
    assert out["grpo"] == rl["grpo"] and out["loss_fn"] == rl["loss_fn"]   # same names: passed through
    cmd = nemo_rl.command(drv, tmp_path / "nemo_rl.yaml")
    assert cmd[1:] == ["/opt/nemo-rl/examples/run_grpo_math.py", "--config", str(tmp_path / "nemo_rl.yaml")]
    assert nemo_rl.command(nemo_rl.driver_for("dpo"), tmp_path / "c.yaml")[1].endswith("examples/run_dpo.py")
    step = tmp_path / "step_40"
    (step / "policy" / "weights" / "iter_0000040").mkdir(parents=True)
    exp = nemo_rl.export_command(step, tmp_path / "hf")
    assert exp[exp.index("--megatron-ckpt-path") + 1].endswith("iter_0000040")


def test_nano3_rl_dry_run_renders_the_gpu_job(tmp_path):
    r = run_jobs(tmp_path / "store", "submit", "nano3", "--stage", "all", "--executor", "slurm", "--dry-run",
                 "--allow-unpinned")
    assert r.code == 0, r.err
    rl = r.out.split("### nano3/rl ")[1].split("### ")[0]
    for expected in ("#SBATCH --nodes=8", "#SBATCH --gpus-per-node=8", "#SBATCH --ntasks-per-node=1",
                     "--container-image=nvcr.io#nvidia/nemo-rl", "afterok:",
                     # what the job itself launches: NeMo RL's driver, vLLM colocated with the policy
                     "# rank 0 runs: python3 /opt/nemo-rl/examples/run_grpo_math.py --config <run rl>/nemo_rl.yaml",
                     "# generation: vllm colocated=True tensor_parallel_size=4", "cluster: 8 nodes x 8 GPUs",
                     "#   model_name: <input policy>"):
        assert expected in rl, expected
    assert not (tmp_path / "store" / "runs").exists() or not any((tmp_path / "store" / "runs").iterdir())
