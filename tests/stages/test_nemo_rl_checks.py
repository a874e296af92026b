"""nano3's NeMo RL configs as NeMo RL's nano-v3 branch would take them: merged with their `defaults:`
parents as its loader merges them, then the refusals its policy, generation, logger, algorithm setup and
drivers make at construction (stages/backends/nemo_rl_checks.py, each with its upstream file and line); and the
rl/rm run's own rules that follow NeMo RL's behaviour (its stop condition, its best checkpoint, W&B offline).
The facts are NeMo RL's nano-v3 branch (823fcc904), each cited by file and line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import recipes


def nano3(stage, overrides=()):
    r = recipes.load("nano3")
    return recipes.compose(r, stage, list(overrides)), dict(r.stage(stage).resources)


def rendered(stage, overrides=()):
    from stages.backends import nemo_rl

    cfg, res = nano3(stage, overrides)
    drv, out = nemo_rl.render(cfg, stage, res)
    return cfg, res, drv, out, nemo_rl.merged(drv, out, Path(f"/runs/{stage}"))


@pytest.mark.parametrize("stage,overrides,script", [
    ("rl", [], "examples/run_grpo_math.py"),
    ("rl", ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"], "examples/run_dpo.py"),
    ("rm", [], "examples/run_rm.py"),
])
def test_every_nano3_nemo_rl_config_merged_with_its_parent_passes_nemo_rls_construction_checks(stage, overrides, script):
    from stages.backends import nemo_rl, nemo_rl_checks

    cfg, res, drv, out, full = rendered(stage, overrides)
    assert drv.script == script
    assert nemo_rl_checks.problems(nemo_rl_checks.Job(full, drv.keys, nemo_rl.job_env("offline"))) == []
    assert nemo_rl.check_config(cfg, stage, res) == []
    # What the parent brings and ours keeps: the keys run_grpo_math.py reads directly (lines 79-80, 107)
    if drv.keys == "grpo":
        assert {"prompt_file", "system_prompt_file", "max_input_seq_length", "dataset_name"} <= set(full["data"])
        assert full["grpo"]["val_batch_size"] == 256                          # grpo_math_1B.yaml:14, never set by us
        assert full["policy"]["make_sequence_length_divisible_by"] == 2       # Megatron's TP, not DTensor's 1


def test_grpo_and_dpo_run_megatron_with_dtensor_and_its_torch_optimizer_off_as_nvidias_grpo_nanov3():
    """NeMo RL refuses Megatron and DTensor together (lm_policy.py:84); grpo_math_1B.yaml:86 and dpo.yaml:53
    enable DTensor. NVIDIA's grpo_nanov3.yaml: dtensor_cfg.enabled false, optimizer null, scheduler null,
    moe_router_dtype fp32, moe_router_bias_update_rate 1e-3, use_on_policy_kl_approximation true,
    defer_fp32_logits true, logprob_chunk_size 2048."""
    for overrides in ([], ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"]):
        _, _, drv, _, full = rendered("rl", overrides)
        pol = full["policy"]
        assert pol["megatron_cfg"]["enabled"] is True and pol["dtensor_cfg"]["enabled"] is False
        assert pol["optimizer"] is None and pol["scheduler"] is None
        assert pol["megatron_cfg"]["moe_router_dtype"] == "fp32"            # parent: fp64
        assert pol["megatron_cfg"]["moe_router_bias_update_rate"] == 1e-3   # parent: 0.0
        assert pol["megatron_cfg"]["defer_fp32_logits"] is True and pol["logprob_chunk_size"] == 2048
    _, _, _, _, grpo = rendered("rl")
    assert grpo["loss_fn"]["use_on_policy_kl_approximation"] is True        # parent: false
    _, _, _, _, dpo = rendered("rl", ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"])
    assert dpo["policy"]["sequence_packing"]["enabled"] is False            # dpo.py:133 refuses packing


@pytest.mark.parametrize("override,where", [
    ("rl.policy.dtensor_cfg.enabled=true", "lm_policy.py:84"),
    ("rl.policy.generation.top_p=0.9", "vllm_generation.py:105"),
    ("+rl.policy.generation.top_k=50", "vllm_generation.py:93"),
    ("rl.policy.megatron_cfg.defer_fp32_logits=false", "megatron_policy_worker.py:754"),
    ("rl.checkpointing.metric_name=accuracy", "grpo.py:1570"),
    ("+rl.policy.dynamic_batching.enabled=true", "lm_policy.py:213"),
    ("+rl.loss_fn.force_on_policy_ratio=true rl.policy.train_global_batch_size=1024", "grpo.py:609"),
])
def test_a_config_nemo_rl_would_refuse_is_refused_with_its_upstream_line(override, where):
    from stages.backends import nemo_rl

    cfg, res = nano3("rl", override.split())
    [problem] = nemo_rl.check_config(cfg, "rl", res)
    assert "(NeMo RL refuses at nemo_rl/" in problem and where in problem, problem


def test_a_bad_override_is_refused_at_submit_in_one_line_and_nothing_is_written(tmp_path):
    from helpers import run_jobs, tree_digest

    store = tmp_path / "store"
    r = run_jobs(store, "submit", "nano3", "--stage", "all", "--dry-run", "rl.policy.dtensor_cfg.enabled=true")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "policy.megatron_cfg.enabled and policy.dtensor_cfg.enabled are both true" in r.err
    assert tree_digest(store) == "absent"


def test_the_loader_resolves_a_parents_relative_defaults_against_the_top_configs_folder():
    """nemo_rl/utils/config.py:63 passes the top config's base_dir to every parent: grpo_rm_1B.yaml's
    `defaults: grpo_math_1B.yaml` is looked up beside our nemo_rl.yaml, not in examples/configs."""
    from stages.backends import nemo_rl, nemo_rl_checks

    rm_env = {"precision": "bfloat16", "batch_size": 8, "resources": {"gpus_per_node": 8, "num_nodes": 1}}
    cfg, res = nano3("rl", ["~rl.env.math", f"+rl.env.reward_model={rm_env}".replace("'", "")])
    drv, out = nemo_rl.render(cfg, "rl", {**res, "nodes": res["nodes"] + 1})
    assert drv.beside == ("examples/configs/grpo_math_1B.yaml",)
    with pytest.raises(nemo_rl_checks.LoadError, match="/runs/rl/grpo_math_1B.yaml"):
        nemo_rl_checks.load(out, "/runs/rl/nemo_rl.yaml", str(nemo_rl.REPO))          # nothing placed beside it
    full = nemo_rl.merged(drv, out, Path("/runs/rl"))                               # the run copies it there
    assert full["env"]["reward_model"]["enabled"] is True and full["grpo"]["val_batch_size"] == 256
    assert nemo_rl.check_config(cfg, "rl", {**res, "nodes": res["nodes"] + 1}) == []


def test_the_merge_is_omegaconfs_later_wins_with_interpolations_resolved_after_it():
    from stages.backends import nemo_rl_checks

    ours = {"defaults": "/opt/nemo-rl/examples/configs/grpo_math_1B.yaml",
            "policy": {"max_total_sequence_length": 777, "generation": {"vllm_cfg": {"tensor_parallel_size": 2}}}}
    full = nemo_rl_checks.load(ours, "/runs/x/nemo_rl.yaml", "/opt/nemo-rl")
    assert full["policy"]["generation"]["max_new_tokens"] == 777        # ${policy.max_total_sequence_length} in the parent
    assert full["policy"]["generation"]["vllm_cfg"]["max_model_len"] == 777
    assert full["policy"]["generation"]["vllm_cfg"]["gpu_memory_utilization"] == 0.6   # kept from the parent
    assert full["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 2       # ours wins


def test_wandb_offline_is_in_the_job_env_and_wandb_init_then_needs_no_api_key(tmp_path):
    """NeMo RL's Logger builds WandbLogger when logger.wandb_enabled (logger.py:857), which calls
    wandb.init(**logger.wandb, dir=...) (logger.py:188). With the env rl/rm run the driver with, that
    succeeds without WANDB_API_KEY and writes the run under the log folder; without it the check refuses."""
    from stages.backends import nemo_rl, nemo_rl_checks

    _, _, drv, _, full = rendered("rl")
    assert full["logger"]["wandb_enabled"] is True and nemo_rl.job_env("offline") == {"WANDB_MODE": "offline"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(nemo_rl.job_env("offline"), HOME=str(tmp_path), WANDB_SILENT="true")
    code = ("import json, sys, wandb; cfg = json.loads(sys.argv[1]); "
            "run = wandb.init(**cfg, dir=sys.argv[2]); run.log({'x': 1}); run.finish(); print(run.id)")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(full["logger"]["wandb"]), str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    [problem] = nemo_rl_checks.problems(nemo_rl_checks.Job(full, drv.keys, env={}))
    assert "logger.py:857" in problem and "WANDB_API_KEY" in problem


def _manifest(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}", "answer": "1"}) + "\n" for i in range(n)))
    (folder / "manifest.json").write_text(json.dumps({"train": n}))
    return folder / "train.jsonl"


def test_grpo_ends_at_its_epoch_so_the_requeue_rule_counts_prompts_per_epoch(tmp_path):
    """grpo.py:1067: `while current_epoch < max_num_epochs and total_steps < max_num_steps`, an epoch being
    len(dataloader) = prompts // num_prompts_per_step (drop_last, grpo.py:261). nano3: 128 prompts a step,
    1 epoch, 1000 steps: 5,000 prompts end at step 39, so a run whose last checkpoint is step_39 is done."""
    from stages.backends import nemo_rl

    _, _, drv, out, full = rendered("rl")
    out["data"]["train_data_path"] = str(_manifest(tmp_path / "prompts", 5000))
    assert nemo_rl.rows(drv, out) == 5000
    assert nemo_rl.final_step("grpo", full, 5000) == 39
    assert nemo_rl.final_step("grpo", full, 10**6) == 1000                  # max_num_steps first
    full["grpo"]["max_num_epochs"] = 3
    assert nemo_rl.final_step("grpo", full, 5000) == 117
    _, _, _, _, rm = rendered("rm")
    assert nemo_rl.final_step("rm", rm, 1000) == 7                            # max_num_steps -1: epochs only (1000 // 128)


def test_the_exported_step_is_the_best_by_the_validation_metric(tmp_path):
    """CheckpointManager writes training_info.json per step_N (nemo_rl/utils/checkpoint.py:136) with the
    metric under checkpointing.metric_name; the export takes the best (latest on ties), not the last."""
    from stages.backends import nemo_rl

    steps = []
    for n, acc in ((10, 0.41), (20, 0.55), (30, 0.48)):
        d = tmp_path / f"step_{n}"
        d.mkdir()
        (d / "training_info.json").write_text(json.dumps({"step": n, "val:accuracy": acc}))
        steps.append(d)
    assert nemo_rl.best_step(steps, {"metric_name": "val:accuracy", "higher_is_better": True}).name == "step_20"
    assert nemo_rl.best_step(steps, {"metric_name": "val:accuracy", "higher_is_better": False}).name == "step_10"
    assert nemo_rl.best_step(steps, {"metric_name": "val:loss", "higher_is_better": False}).name == "step_30"


def test_evals_vllm_engines_start_with_the_configured_python(tmp_path):
    """The nemo-rl image's vLLM lives in /opt/ray_venvs (its Dockerfile; prefetch_venvs.py writes
    /usr/local/bin/python-VllmGenerationWorker): eval's engine processes are started by that Python, as
    interpreters of their own with our code on PYTHONPATH (tests/twins/test_eval_in_twin.py runs one)."""
    from stages import eval as ev

    cmd, env = ev.engine_command({"vllm_python": "/x/python-vllm"}, tmp_path / "job.json")
    assert cmd == ["/x/python-vllm", "-c", ev.ENGINE, str(tmp_path / "job.json")]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(ev.__file__).resolve().parent.parent)
    assert ev.engine_command({}, tmp_path / "job.json")[0][0] == sys.executable
    cfg, _ = nano3("eval")
    assert cfg["eval"]["vllm_python"] == "/usr/local/bin/python-VllmGenerationWorker"


def test_the_reward_models_export_config_loads_a_one_score_sequence_classifier(tmp_path):
    """NeMo RL's DCP -> HF converter writes the SFT model's causal-LM config next to the reward model's
    weights (native_checkpoint.py: AutoConfig.from_pretrained(policy.model_name).save_pretrained)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, LlamaConfig

    from stages.backends import nemo_rl

    LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                vocab_size=64, architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    assert AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(tmp_path)).score.out_features == 2
    nemo_rl.as_reward_model(tmp_path)
    cfg = AutoConfig.from_pretrained(tmp_path)
    model = AutoModelForSequenceClassification.from_config(cfg)
    assert cfg.architectures == ["LlamaForSequenceClassification"] and type(model).__name__ == cfg.architectures[0]
    assert model.score.out_features == 1


#: Nemotron-3-Nano's config.json as the checkpoint ships it, cut to what decides the class it loads as:
#: its own modelling code, reached through auto_map (no sequence classifier among them).
NEMOTRON_H = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
              "auto_map": {"AutoConfig": "configuration_nemotron_h.NemotronHConfig",
                           "AutoModel": "modeling_nemotron_h.NemotronHForCausalLM",
                           "AutoModelForCausalLM": "modeling_nemotron_h.NemotronHForCausalLM"}}
#: The interpreter of the Megatron-Bridge venv (dev/bridge_venv.sh): transformers 4.57, the series of the
#: nemo-rl image's 4.57.1 (NeMo RL 823fcc904 uv.lock); JOBS_MCORE_PYTHON names another.
PINNED_PYTHON = os.environ.get("JOBS_MCORE_PYTHON") or str(Path(__file__).parents[2] / ".venv-bridge" / "bin" / "python")
ROOT = Path(__file__).parents[2]


def _in_pinned_transformers(script: str, *args) -> dict:
    if not Path(PINNED_PYTHON).is_file():
        pytest.skip(f"{PINNED_PYTHON} is absent: dev/bridge_venv.sh builds it, or set JOBS_MCORE_PYTHON")
    p = subprocess.run([PINNED_PYTHON, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{script}", *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_reward_models_export_loads_with_the_class_it_names_in_the_images_transformers(tmp_path):
    """In transformers 4.57 (the image's series), as NeMo RL's DTensor worker loads a reward model: the
    exported config's class is the one AutoModelForSequenceClassification builds, with one score."""
    from transformers import LlamaConfig

    from stages.backends import nemo_rl

    LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                vocab_size=64, architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    nemo_rl.as_reward_model(tmp_path)
    got = _in_pinned_transformers(
        "import json, transformers\n"
        "from transformers import AutoConfig, AutoModelForSequenceClassification\n"
        "from stages.backends.nemo_rl import sequence_classifier_problem\n"
        "cfg = AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "m = AutoModelForSequenceClassification.from_config(cfg, trust_remote_code=True)\n"
        "print(json.dumps({'version': transformers.__version__, 'class': type(m).__name__, 'named': cfg.architectures,"
        " 'scores': m.score.out_features, 'problem': sequence_classifier_problem(sys.argv[1])}))", tmp_path)
    assert got["version"].startswith("4.57.")
    assert got["class"] == got["named"][0] == "LlamaForSequenceClassification" and got["scores"] == 1
    assert got["problem"] is None


def test_a_nemotron_h_reward_model_has_no_class_to_load_as_and_rm_says_so_before_training(tmp_path):
    """The export would name NemotronHForSequenceClassification, which neither the image's transformers
    (4.57: no nemotron_h at all) nor the checkpoint's code defines, and NeMo RL's Megatron backend trains
    no reward model (megatron_policy_worker.py:567-572): the rm job refuses the model in one line before
    NeMo RL starts. This venv's transformers has a native NemotronH: a tiny one, built on CPU, has no
    sequence-classification class either."""
    import transformers
    from transformers import AutoModelForSequenceClassification, NemotronHConfig

    from stages.backends import nemo_rl

    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_H))
    nemo_rl.as_reward_model(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["NemotronHForSequenceClassification"]
    got = _in_pinned_transformers(
        "import json, transformers\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES\n"
        "from stages.backends.nemo_rl import sequence_classifier_problem\n"
        "print(json.dumps({'version': transformers.__version__, 'native': 'nemotron_h' in CONFIG_MAPPING_NAMES,"
        " 'defined': hasattr(transformers, 'NemotronHForSequenceClassification'),"
        " 'problem': sequence_classifier_problem(sys.argv[1])}))", tmp_path)
    assert got["version"].startswith("4.57.") and not got["native"] and not got["defined"]
    problem = got["problem"]
    assert problem.startswith("'nemotron_h' has no sequence-classification class in transformers 4.57.")
    assert "auto_map: AutoConfig, AutoModel, AutoModelForCausalLM" in problem and "\n" not in problem
    assert not hasattr(transformers, "NemotronHForSequenceClassification")
    tiny = NemotronHConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, hybrid_override_pattern="M*",
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, mamba_num_heads=2,
                           mamba_head_dim=16, ssm_state_size=8, n_groups=1, intermediate_size=64)
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForSequenceClassification.from_config(tiny)
    assert nemo_rl.sequence_classifier_problem(tmp_path).startswith("'nemotron_h' has no sequence-classification class")


def test_a_relative_vllm_python_or_one_with_hf_generation_is_refused():
    from stages import eval as ev

    cfg, res = nano3("eval", ["eval.vllm_python=python3"])
    assert "eval.vllm_python must be an absolute path (got 'python3')" in ev.check_config(cfg, res)
    cfg, res = nano3("eval", ["eval.backend=hf", "~eval.vllm_cfg", "~eval.vllm_kwargs"])
    assert "eval.vllm_python applies only to eval.backend=vllm (remove it, or set the backend)" in ev.check_config(cfg, res)
    assert ev.check_config(nano3("eval")[0], nano3("eval")[1]) == []


def test_rl_waits_on_the_reward_model_only_when_it_scores_rollouts_with_it(tmp_path):
    """A verifier-only GRPO (nano3's math environment, tiny's default) never loads the rm stage's model:
    its job does not wait on rm nor on the preference pairs; scored by the reward model, it waits on both
    rm and what it reads. run_grpo_math.py builds only env["math"] (NeMo RL nano-v3)."""
    from jobs import plan as planning
    from lineage import Store
    from stages import rl

    store = Store(tmp_path / "store")

    def upstream(recipe, stage_sel, overrides=()):
        p = planning.make_plan(store, recipe, stage_sel, overrides=list(overrides), executor="slurm")
        return {role: stage for role, (stage, _) in next(s for s in p.stages if s.stage == "rl").upstream.items()}

    assert upstream("nano3", "all") == {"policy": "sft", "prompts": "prep_rl"}
    assert upstream("tiny", "all") == {"policy": "sft", "prompts": "data"}
    assert upstream("tiny", "all", ["rl.reward.kind=reward_model"]) == {
        "policy": "sft", "prompts": "data", "reward_model": "rm"}
    assert upstream("tiny", "all", ["rl.algorithm=dpo", "rl.dpo.pairs=offline"]) == {
        "policy": "sft", "prompts": "data", "prefs": "data"}
    rm_env = {"precision": "bfloat16", "batch_size": 8, "resources": {"gpus_per_node": 8, "num_nodes": 1}}
    cfg, _ = nano3("rl", ["~rl.env.math", f"+rl.env.reward_model={rm_env}".replace("'", "")])
    assert rl.unused_inputs(cfg) == {"prefs"}
    assert rl.unused_inputs(nano3("rl", ["rl.algorithm=dpo"])[0]) == {"prompts", "reward_model"}


#: The pinned upstream sources (`git archive`s of the images' commits); JOBS_UPSTREAM_DIR names another folder.
UPSTREAM = Path(os.environ.get("JOBS_UPSTREAM_DIR") or ROOT.parent / "shared" / "upstream")


def _upstream_yaml(archive: str, member: str) -> dict:
    import tarfile

    import yaml

    path = UPSTREAM / archive
    if not path.is_file():
        pytest.skip(f"{path} is absent: the pinned upstream sources (set JOBS_UPSTREAM_DIR)")
    with tarfile.open(path) as tar:
        name = next(n for n in tar.getnames() if n.endswith(member))
        return yaml.safe_load(tar.extractfile(name).read())


def _at(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def test_nano3_grpo_takes_nvidias_nano_v3_values_where_the_1b_parent_differs():
    """Our rendered GRPO config merged over its parent (grpo_math_1B.yaml) as NeMo RL's loader merges it
    (OmegaConf), read against NeMo RL nano-v3's own grpo_nanov3.yaml, both from the pinned archive."""
    from omegaconf import OmegaConf

    parent = _upstream_yaml("nemo-rl-823fcc904.tar.gz", "examples/configs/grpo_math_1B.yaml")
    nvidia = _upstream_yaml("nemo-rl-823fcc904.tar.gz", "examples/nemo_gym/grpo_nanov3.yaml")
    _, _, _, out, _ = rendered("rl")
    ours = OmegaConf.to_container(OmegaConf.merge(parent, {k: v for k, v in out.items() if k != "defaults"}))
    keys = ("policy.megatron_cfg.scheduler.lr_warmup_init", "grpo.overlong_filtering",
            "policy.megatron_cfg.moe_permute_fusion")
    assert {k: _at(parent, k) for k in keys} != {k: _at(nvidia, k) for k in keys}   # what a 1B parent would give
    assert {k: _at(ours, k) for k in keys} == {k: _at(nvidia, k) for k in keys}


@pytest.mark.parametrize("overrides,says", [
    (["rl.step_time_s=1200"], "rl.checkpointing.checkpoint_must_save_by: 00:03:40:00 + one step (1200 s) ends 300 s "
                              "after the job's signal (240 min less 300 s)"),
    (["rl.checkpointing.checkpoint_must_save_by=00:03:58:00"], "rl.checkpointing.checkpoint_must_save_by: 00:03:58:00 "
                                                              "ends 180 s after the job's signal"),
    (["rl.checkpointing.checkpoint_must_save_by=3h40m"], "checkpoint_must_save_by must be DD:HH:MM:SS (got '3h40m')"),
    (["rl.step_time_s=-5"], "rl.step_time_s must be a number of seconds > 0, or null (got -5)"),
])
def test_a_save_deadline_that_cannot_fit_the_jobs_time_is_refused_at_submit(store_path, overrides, says):
    """nano3's rl: 240 min, Slurm's signal 300 s before the end; NeMo RL saves up to one step before
    checkpoint_must_save_by and may end one step after it. A 15-minute step still fits 3:40."""
    from helpers import run_jobs, tree_digest

    from stages.backends import nemo_rl

    cfg, res = nano3("rl", ["rl.step_time_s=900"])
    assert nemo_rl.check_config(cfg, "rl", res) == []
    before = tree_digest(store_path)
    r = run_jobs(store_path, "submit", "nano3", "--stage", "rl", "--dry-run", *overrides)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert tree_digest(store_path) == before
