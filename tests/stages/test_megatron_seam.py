"""The Megatron-Bridge seam on plain data: our stage config -> Bridge's ConfigContainer fields for the
version the nemo image carries (nano-v3) or another listed one (0.3.1), the rendered scripts and
commands. Megatron is not installed here; nothing below imports it (tests/stages/test_bridge_real.py
applies the same overrides to the real Bridge 0.3.1)."""
import ast
import copy

import pytest
import yaml

from jobs import recipes
from stages.contract import Distributed, StageContext
from stages.backends.megatron.config import TranslationError, translate, upstream
from stages.backends.megatron.launch import (corpus_shards, overrides_yaml, prepare, render_export, render_import,
                                    render_train, torchrun_command)

SFT = {
    "seed": 7,
    "base_model": {"hf_model_id": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-Base-BF16", "trust_remote_code": True},
    "tracking": {"wandb": "offline", "project": "nano3", "tensorboard": True},
    "sft": {
        "backend": "megatron",
        "model": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
                  "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1, "sequence_parallel": True,
                  "calculate_per_token_loss": True},
        "dataset": {"seq_length": 4096, "packed_sequence": True},
        "train": {"train_iters": 3000, "global_batch_size": 256, "micro_batch_size": 1, "eval_interval": 200,
                  "eval_iters": 16, "exit_signal_handler": True},
        "optimizer": {"optimizer": "adam", "lr": 5e-6, "min_lr": 5e-7, "weight_decay": 0.1, "adam_beta1": 0.9,
                      "adam_beta2": 0.95, "clip_grad": 1.0, "bf16": True},
        "scheduler": {"lr_decay_style": "cosine", "lr_warmup_iters": 100, "lr_decay_iters": None},
        "checkpoint": {"save_interval": 250, "most_recent_k": 2, "ckpt_format": "torch_dist"},
        "logger": {"log_interval": 10},
    },
}
WHERE = dict(checkpoint_dir="/runs/r1/checkpoints", export_dir="/runs/r1/outputs/model", log_dir="/runs/r1",
             run_name="sft-r1")


def sft_job(config=SFT, gpus=32, **kw):
    return translate(config, "sft", hf_model="/store/sft_in", data={"dataset_root": "/store/sft_data"},
                     gpus=gpus, **{**WHERE, **kw})


def test_sft_config_becomes_bridge_overrides_in_bridges_own_names():
    job = sft_job()
    assert job.version == "nano-v3"                     # what containers.lock says the nemo image carries
    assert job.recipe.endswith("nemotron_3_nano:nemotron_3_nano_finetune_config")   # nano-v3's name
    assert job.entry == "megatron.bridge.training.finetune:finetune"
    assert job.data_parallel_size == 16
    o = job.overrides()
    assert set(o) == {"model", "train", "optimizer", "scheduler", "checkpoint", "logger", "dataset", "tokenizer", "rng"}
    assert o["model"] == {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
                          "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1, "sequence_parallel": True,
                          "seq_length": 4096, "calculate_per_token_loss": True}
    # nano-v3 has no ValidationConfig: eval_* stay TrainingConfig fields there
    assert o["train"] == {"train_iters": 3000, "global_batch_size": 256, "micro_batch_size": 1, "exit_signal_handler": True,
                          "eval_interval": 200, "eval_iters": 16}
    assert o["optimizer"]["lr"] == 5e-6 and o["optimizer"]["bf16"] is True
    assert o["scheduler"] == {"lr_decay_style": "cosine", "lr_warmup_iters": 100}   # null decay iters: Bridge's default
    assert o["checkpoint"] == {"save": "/runs/r1/checkpoints/megatron", "load": "/runs/r1/checkpoints/megatron",
                               "pretrained_checkpoint": "/runs/r1/checkpoints/imported", "save_interval": 250,
                               "most_recent_k": 2, "ckpt_format": "torch_dist", "async_save": False}
    # the whole section replaced: the recipe's SQuAD HFDatasetConfig never survives
    assert o["dataset"] == {"_target_": "megatron.bridge.training.config.FinetuningDatasetConfig",
                            "dataset_root": "/store/sft_data", "seq_length": 4096, "seed": 7, "do_test": False,
                            "dataset_kwargs": None,
                            "packed_sequence_specs": {"_target_": "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs",
                                                      "packed_sequence_size": 4096}}
    assert o["tokenizer"] == {"tokenizer_model": "/store/sft_in", "tokenizer_type": "HuggingFaceTokenizer"}
    assert o["logger"] == {"log_interval": 10, "tensorboard_dir": "/runs/r1/tensorboard", "wandb_project": "nano3",
                           "wandb_exp_name": "sft-r1", "wandb_save_dir": "/runs/r1"}
    assert o["rng"] == {"seed": 7}
    assert yaml.safe_load(overrides_yaml(job)) == o        # what the rendered script hands to Bridge
    assert sft_job(version="0.3.1").recipe.endswith(":nemotron_3_nano_sft_config")   # 0.3.1's name


def test_prep_sft_layout_becomes_packed_specs_and_a_pack_size_mismatch_is_refused():
    spec = {"dataset_kwargs": {"prompt_template": "{input}{output}", "label_key": "output"},
            "packed_sequence_specs": {"packed_sequence_size": 4096, "packed_train_data_path": "packed/training_4096.npy",
                                      "packed_val_data_path": "packed/validation_4096.npy",
                                      "packed_metadata_path": "packed/4096_metadata.jsonl"}}
    job = translate(SFT, "sft", hf_model="/m", data={"dataset_root": "/d", "bridge": spec}, gpus=32, **WHERE)
    d = job.overrides()["dataset"]
    assert d["dataset_kwargs"] == spec["dataset_kwargs"]
    assert d["packed_sequence_specs"]["packed_train_data_path"] == "/d/packed/training_4096.npy"
    assert d["packed_sequence_specs"]["packed_metadata_path"] == "/d/packed/4096_metadata.jsonl"
    spec["packed_sequence_specs"]["packed_sequence_size"] = 2048
    with pytest.raises(TranslationError, match="packed_sequence_size 2048"):
        translate(SFT, "sft", hf_model="/m", data={"dataset_root": "/d", "bridge": spec}, gpus=32, **WHERE)


def test_any_field_of_the_target_version_passes_through_and_a_missing_one_is_refused():
    cfg = copy.deepcopy(SFT)
    cfg["sft"]["model"]["recompute_granularity"] = "full"          # a real provider field in both versions
    cfg["sft"]["dataset"]["num_workers"] = 2
    o = sft_job(cfg).overrides()
    assert o["model"]["recompute_granularity"] == "full" and o["dataset"]["num_workers"] == 2
    fields = upstream()["megatron_bridge"]
    only_031 = sorted(set(fields["0.3.1"]["sections"]["dataset/sft"]) - set(fields["nano-v3"]["sections"]["dataset/sft"]))
    assert only_031 == ["trust_remote_code"]
    cfg["sft"]["dataset"]["trust_remote_code"] = True
    assert sft_job(cfg, version="0.3.1").overrides()["dataset"]["trust_remote_code"] is True
    with pytest.raises(TranslationError, match="sft.dataset.trust_remote_code: unknown key"):
        sft_job(cfg)                                                # nano-v3 lacks it: Bridge would skip it


def test_unpacked_sft_turns_the_recipes_packing_off_and_disabled_wandb_is_not_configured():
    cfg = copy.deepcopy(SFT)
    cfg["sft"]["dataset"]["packed_sequence"] = False
    cfg["tracking"]["wandb"] = "disabled"
    o = sft_job(cfg).overrides()
    assert o["dataset"]["packed_sequence_specs"] is None
    assert "wandb_project" not in o["logger"] and "wandb_save_dir" not in o["logger"]


def test_every_problem_is_reported_at_once_before_the_cluster_sees_it():
    cfg = copy.deepcopy(SFT)
    cfg["sft"]["model"]["sequence_paralel"] = True                  # typo
    cfg["sft"]["model"]["tensor_model_parallel_size"] = 1            # sequence_parallel now invalid
    cfg["sft"]["train"]["global_batch_size"] = 100                   # not a multiple of 1 * 32
    cfg["sft"]["optimizer"]["min_lr"] = 1.0                          # above lr
    cfg["sft"]["extra"] = {}
    with pytest.raises(TranslationError) as e:
        sft_job(cfg)
    msg = str(e.value)
    for needle in ("sft.model.sequence_paralel: unknown key (did you mean sequence_parallel", "global_batch_size 100",
                   "sequence_parallel needs tensor_model_parallel_size > 1", "min_lr 1.0 > lr", "sft.extra: unknown section"):
        assert needle in msg, (needle, msg)
    with pytest.raises(TranslationError, match="not a multiple of tensor\\*pipeline\\*context = 2"):
        sft_job(gpus=7)
    with pytest.raises(TranslationError, match="expert_tensor\\*expert\\*pipeline = 8"):
        sft_job(gpus=6)


def test_pretrain_reads_the_blend_where_the_version_reads_it(tmp_path):
    (tmp_path / "web_text_document.bin").touch()
    (tmp_path / "web_text_document.idx").touch()
    (tmp_path / "code_text_document.idx").touch()
    assert corpus_shards(tmp_path) == {"train": [(str(tmp_path / "code_text_document"), 1.0),
                                                 (str(tmp_path / "web_text_document"), 1.0)], "valid": []}
    (tmp_path / "blend.json").write_text('{"web/train_00000": 0.7, "code/train_00000": 0.3}')
    (tmp_path / "blend_valid.json").write_text('{"web/valid_00000": 0.5, "code/valid_00000": 0.5}')
    shards = corpus_shards(tmp_path)
    assert shards["train"] == [(str(tmp_path / "code/train_00000"), 0.3), (str(tmp_path / "web/train_00000"), 0.7)]
    cfg = copy.deepcopy(SFT)
    cfg["pretrain"] = cfg.pop("sft")
    cfg["pretrain"]["model"]["seq_length"] = cfg["pretrain"].pop("dataset")["seq_length"]
    job = translate(cfg, "pretrain", hf_model="nvidia/base", data={**shards, "tokenizer": "/store/tok"},
                    gpus=64, hf_revision="abc123", **WHERE)
    o = job.overrides()
    assert job.entry == "megatron.bridge.training.pretrain:pretrain" and job.recipe.endswith(":nemotron_3_nano_pretrain_config")
    # megatron-core's blend_per_split (train, valid, test), never a data_path these versions lack (-> mock data)
    assert o["dataset"] == {"sequence_length": 4096, "mock": False, "blend": None, "split": None,
                            "blend_per_split": [[[str(tmp_path / "code/train_00000"), str(tmp_path / "web/train_00000")], [0.3, 0.7]],
                                                [[str(tmp_path / "code/valid_00000"), str(tmp_path / "web/valid_00000")], [0.5, 0.5]],
                                                None]}
    assert o["tokenizer"]["tokenizer_model"] == "/store/tok"
    assert "abc123" in render_import(job)
    no_valid = translate(cfg, "pretrain", hf_model="b", data={"train": shards["train"]}, gpus=64, **WHERE)
    assert no_valid.overrides()["dataset"]["blend"] == [[p for p, _ in shards["train"]], [0.3, 0.7]]
    with pytest.raises(TranslationError, match="no Megatron indexed shards"):
        translate(cfg, "pretrain", hf_model="nvidia/base", data={"train": []}, gpus=64, **WHERE)


def test_rendered_scripts_are_python_calling_the_real_bridge_api():
    job = sft_job()
    train = render_train(job, "/runs/r1/megatron/bridge_overrides.yaml")
    imp, exp = render_import(job), render_export(job)
    for script in (train, imp, exp):
        ast.parse(script)
    assert "process_config_with_overrides" not in train       # absent from nano-v3: our own strict applier
    assert "raise KeyError" in train and "nemotron_3_nano_finetune_config" in train and "Bridge nano-v3" in train
    assert "from megatron.bridge.training.gpt_step import forward_step" in train
    assert "megatron.bridge.training.finetune:finetune" in train and "forward_step_func=forward_step" in train
    assert "AutoBridge.import_ckpt('/store/sft_in', '/runs/r1/checkpoints/imported', trust_remote_code=True" in imp
    assert "AutoBridge.from_hf_pretrained('/store/sft_in'" in exp
    assert "bridge.export_ckpt('/runs/r1/checkpoints/megatron', '/runs/r1/outputs/model')" in exp
    cmd = torchrun_command("/runs/r1/megatron/bridge_train.py", 8, 4, 1, "10.0.0.1", 29500)
    assert cmd == ["torchrun", "--nproc-per-node=8", "--nnodes=4", "--node-rank=1", "--master-addr=10.0.0.1",
                   "--master-port=29500", "/runs/r1/megatron/bridge_train.py"]


def test_nano3_recipe_stages_translate(tmp_path):
    """The nano3 YAMLs compose into configs the seam accepts, at their GPU counts."""
    nano3 = recipes.load("nano3")
    for stage, inputs in (("sft", {"model": tmp_path / "m", "data": tmp_path / "d"}),
                          ("pretrain", {"corpus": tmp_path / "c", "tokenizer": tmp_path / "t"})):
        cfg = recipes.compose(nano3, stage, [])
        assert cfg[stage].get("backend") == "megatron", f"nano3 {stage} left the megatron backend"
        (tmp_path / "c").mkdir(exist_ok=True)
        (tmp_path / "c" / "shard_text_document.idx").touch()
        res = nano3.stage(stage).resources
        ctx = StageContext(run_id="r1", recipe="nano3", stage=stage, config=cfg, inputs=inputs,
                           run_dir=tmp_path / stage, dist=Distributed(world_size=res["nodes"]))
        job, files = prepare(ctx, stage, res["gpus_per_node"])
        assert job.gpus == res["nodes"] * res["gpus_per_node"]
        assert yaml.safe_load(files["overrides"].read_text()) == job.overrides()
        ast.parse(files["train"].read_text())


# ---- NeMo RL (rl, rm) and what a submit refuses ------------------------------------------------

def nano3_config(stage, overrides=()):
    nano3 = recipes.load("nano3")
    return recipes.compose(nano3, stage, list(overrides)), nano3.stage(stage).resources


def test_nemo_rl_configs_inherit_the_images_example_and_carry_the_keys_their_drivers_read():
    from stages.backends import nemo_rl

    cfg, res = nano3_config("rl")
    drv, out = nemo_rl.render(cfg, "rl", res)
    assert drv.script == "examples/run_grpo_math.py"
    assert out["defaults"] == "/opt/nemo-rl/examples/configs/grpo_math_1B.yaml"
    assert out["data"] == {"dataset_name": "ResponseDataset", "train_data_path": "<input prompts>/train.jsonl",
                           "val_data_path": "<input prompts>/validation.jsonl", "input_key": "prompt",
                           "output_key": "answer", "prompt_file": None, "system_prompt_file": None,
                           "max_input_seq_length": 16384}
    assert "dpo" not in out and set(out["env"]) == {"math"}
    assert nemo_rl.check_config(cfg, "rl", res) == []

    cfg, res = nano3_config("rl", ["rl.algorithm=dpo"])
    drv, out = nemo_rl.render(cfg, "rl", res)
    assert drv.script == "examples/run_dpo.py" and out["defaults"].endswith("examples/configs/dpo.yaml")
    assert not {"grpo", "loss_fn", "env"} & set(out)
    assert out["data"]["val_data_paths"] == {"heldout": "<input prefs>/validation.jsonl"}
    [problem] = nemo_rl.check_config(cfg, "rl", res)          # GRPO's val:accuracy is no DPO metric
    assert "rl.checkpointing.metric_name val:accuracy names no DPO validation metric" in problem
    cfg, res = nano3_config("rl", ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"])
    assert nemo_rl.check_config(cfg, "rl", res) == []

    cfg, res = nano3_config("rm")
    drv, out = nemo_rl.render(cfg, "rm", res)
    assert drv.script == "examples/run_rm.py" and out["defaults"].endswith("examples/configs/rm.yaml")
    assert out["policy"]["reward_model_cfg"] == {"reward_model_type": "bradley_terry", "enabled": True}
    assert out["rm"]["max_num_epochs"] == 1 and "policy" not in out["rm"]
    assert nemo_rl.check_config(cfg, "rm", res) == []


def test_reward_model_prompts_go_to_run_grpo_rm_and_a_mix_is_refused():
    from stages.backends import nemo_rl

    rm_env = {"precision": "bfloat16", "batch_size": 8, "resources": {"gpus_per_node": 8, "num_nodes": 1}}
    cfg, res = nano3_config("rl", ["~rl.env.math", f"+rl.env.reward_model={rm_env}".replace("'", "")])
    drv, out = nemo_rl.render(cfg, "rl", res)
    assert drv.script == "examples/run_grpo_rm.py" and out["defaults"].endswith("grpo_rm_1B.yaml")
    assert out["env"]["reward_model"]["model_name"] == "<input reward_model>"
    assert "data parallel = 1 * 28" in nemo_rl.check_config(cfg, "rl", res)[0]   # the RM's node leaves 56 GPUs
    assert nemo_rl.check_config(cfg, "rl", {**res, "nodes": res["nodes"] + 1}) == []
    cfg, res = nano3_config("rl", [f"+rl.env.reward_model={rm_env}".replace("'", "")])
    [problem] = nemo_rl.check_config(cfg, "rl", res)
    assert "rl.env must name exactly one of math, reward_model" in problem


def test_a_bad_layout_or_a_key_the_image_lacks_is_refused_at_submit_in_one_line(tmp_path):
    from helpers import run_jobs, tree_digest

    store = tmp_path / "store"
    env = {"JOBS_PROFILES": str(tmp_path / "none.yaml")}
    for override, needle in (("pretrain.model.tensor_model_parallel_size=3", "not a multiple of tensor*pipeline*context = 3"),
                             ("+sft.dataset.trust_remote_code=true", "sft.dataset.trust_remote_code: unknown key"),
                             ("+rl.grpo.max_num_epoch=2", "rl.grpo.max_num_epoch: NeMo RL nano-v3 has no such key"),
                             ("+rm.policy.dtensor_cfg.foo=1", "rm.policy.dtensor_cfg.foo: NeMo RL nano-v3 has no such key"),
                             ("rl.policy.dtensor_cfg.enabled=true", "(NeMo RL refuses at nemo_rl/models/policy/lm_policy.py:84)"),
                             ("rl.policy.train_global_batch_size=2000", "not a multiple of train_micro_batch_size * data parallel = 1 * 32")):
        r = run_jobs(store, "submit", "nano3", "--stage", "all", "--executor", "slurm", "--dry-run",
                     override, env=env)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and needle in r.err, (override, r.err)
    assert tree_digest(store) == "absent"
    r = run_jobs(store, "submit", "nano3", "--stage", "all", "--executor", "slurm", "--dry-run", env=env)
    assert r.code == 0, r.err
    for needle in ("Megatron-Bridge nano-v3", "nemotron_3_nano_finetune_config", "FinetuningDatasetConfig",
                   "blend_per_split", "run_rm.py", "run_grpo_math.py", "defaults: /opt/nemo-rl/examples/configs/"):
        assert needle in r.out, needle


def test_sft_renders_full_sft_and_refuses_lora_whose_checkpoints_the_export_cannot_read():
    """nemotron_3_nano_finetune_config() defaults peft to "lora" (Bridge nano-v3,
    recipes/nemotronh/nemotron_3_nano.py:356); NVIDIA's Nemotron stage1_sft config sets peft null."""
    job = sft_job()
    assert job.recipe_kwargs == {"peft": None}
    script = render_train(job, "/runs/r1/megatron/bridge_overrides.yaml")
    tree = ast.parse(script)
    assign = next(n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple))
    names = [t.id for t in assign.targets[0].elts]
    values = dict(zip(names, ast.literal_eval(assign.value)))
    assert values["RECIPE_KWARGS"] == {"peft": None} and "load(RECIPE)(**RECIPE_KWARGS)" in script
    assert translate(SFT, "sft", hf_model="/m", data={"dataset_root": "/d"}, gpus=32, version="0.3.1",
                     **WHERE).recipe_kwargs == {}            # 0.3.1's nemotron_3_nano_sft_config is full SFT already
    lora = copy.deepcopy(SFT)
    lora["sft"]["peft"] = "lora"
    with pytest.raises(TranslationError, match="only full SFT .peft: null. is supported"):
        sft_job(lora)
    cfg = nano3_config("sft")[0]
    assert cfg["sft"]["peft"] is None



def test_a_stage_recipe_replaces_nano3s_and_is_called_with_the_hf_model():
    """`sft.recipe: module:function` (another model than Nemotron-3-Nano: the tiny one dev/bridge_gpu.py
    trains) renders that function, called with the HF checkpoint the stage starts from."""
    cfg = copy.deepcopy(SFT)
    cfg["sft"]["recipe"] = "bridge_gpu_recipe:tiny_config"
    job = sft_job(cfg)
    assert job.recipe == "bridge_gpu_recipe:tiny_config" and job.recipe_kwargs == {"hf_model": "/store/sft_in"}
    script = render_train(job, "/runs/r1/megatron/bridge_overrides.yaml")
    assert "RECIPE, RECIPE_KWARGS" in script and "'bridge_gpu_recipe:tiny_config', {'hf_model': '/store/sft_in'}" in script
    for bad in ("bridge_gpu_recipe.tiny_config", "", 3):
        cfg["sft"]["recipe"] = bad
        with pytest.raises(TranslationError, match="sft.recipe must be module:function"):
            sft_job(cfg)



def test_a_warmup_not_below_train_iters_is_shortened_with_the_torch_loops_note(tmp_path):
    """A short run of a recipe (train_iters under its warmup) trains, warming up over a tenth of its
    iterations, and submit says so in one line: what the torch loop does for `sft.steps=20`."""
    import stages.sft
    from helpers import run_jobs

    cfg = copy.deepcopy(SFT)
    cfg["sft"]["train"]["train_iters"] = 50                           # under the recipe's warmup of 100
    job = sft_job(cfg)
    assert job.scheduler.lr_warmup_iters == 5 and job.overrides()["scheduler"]["lr_warmup_iters"] == 5
    assert stages.sft.notes(cfg) == ["sft.scheduler.lr_warmup_iters 100 is not below sft.train.train_iters 50: this run "
                                     "warms up over 5 step(s), a tenth of its steps (set sft.scheduler.lr_warmup_iters "
                                     "below 50 to choose)"]
    assert sft_job().scheduler.lr_warmup_iters == 100 and stages.sft.notes(SFT) == []
    r = run_jobs(tmp_path / "store", "submit", "nano3", "--stage", "all", "--executor", "slurm", "--dry-run",
                 "pretrain.train.train_iters=60", env={"JOBS_PROFILES": str(tmp_path / "none.yaml")})
    assert r.code == 0, r.err
    assert "jobs: note: nano3/pretrain: pretrain.scheduler.lr_warmup_iters 100 is not below pretrain.train.train_iters 60: this run warms up " \
           "over 6 step(s)" in r.err
    assert "lr_warmup_iters: 6" in r.out                               # the overrides the dry run shows

def test_no_gpus_is_a_one_line_problem_not_a_division_by_zero():
    with pytest.raises(TranslationError, match="the megatron backend trains on GPUs: give the stage resources.gpus_per_node"):
        sft_job(gpus=0)

@pytest.mark.parametrize("megatron_core,tp,refused", [
    ("3cbe5c68a40c5820c11fc60fea1143dc6983706e", 4, True),   # Bridge's submodule pointer: groups % TP only
    ("3cbe5c68a40c5820c11fc60fea1143dc6983706e", 2, False),
    ("0.15.3", 4, True),                                       # no 0.15.x release has f7dfb9979
    ("0.16.1", 4, False),                                      # TP a multiple of num_query_groups (2)
    (None, 4, False),                                          # containers.lock as committed
])
def test_tp_against_num_query_groups_follows_the_megatron_core_the_lock_names(monkeypatch, tmp_path, megatron_core, tp,
                                                                             refused):
    """megatron-core TransformerConfig refuses num_query_groups % TP != 0 up to 3cbe5c68a; from f7dfb9979
    (2025-12-07) it also accepts TP % num_query_groups == 0. Nemotron-3-Nano has 2 query groups and
    Bridge's nano-v3 pretrain recipe sets TP 4."""
    import containers

    if megatron_core is not None:
        lock = yaml.safe_load(containers.LOCK.read_text())
        lock["nemo"]["libraries"]["megatron_core"] = megatron_core
        (tmp_path / "containers.lock").write_text(yaml.safe_dump(lock))
        monkeypatch.setattr(containers, "LOCK", tmp_path / "containers.lock")
    config = copy.deepcopy(SFT)
    config["sft"]["model"]["tensor_model_parallel_size"] = tp
    if refused:
        with pytest.raises(TranslationError, match=r"num_query_groups \(2\) to be a multiple of it"):
            sft_job(config)
    else:
        assert sft_job(config).model.tensor_model_parallel_size == tp
