"""The Megatron-Bridge seam on plain data: nano3's config -> Bridge's fields, and the rendered script."""
import ast

import pytest

from jobs import recipes
from stages.megatron.config import TranslationError, translate
from stages.megatron.launch import render_script, torchrun_command


def compose(stage: str, overrides: list[str] = ()) -> dict:
    return recipes.compose(recipes.load("nano3"), stage, list(overrides))


def test_nano3_sft_translates_to_bridge_fields():
    cfg = compose("sft")
    job = translate(cfg, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32, hf_model="/store/art_x")
    assert job.mode == "finetune" and job.hf_model == "/store/art_x" and job.hf_revision is None
    assert job.provider["expert_model_parallel_size"] == cfg["sft"]["model"]["expert_model_parallel_size"]
    assert job.train["global_batch_size"] == cfg["sft"]["train"]["global_batch_size"]
    assert job.optimizer["optimizer"] == "adam" and job.optimizer["bf16"] is True
    assert job.scheduler["lr_decay_iters"] == cfg["sft"]["train"]["train_iters"]   # null -> train_iters
    assert job.checkpoint["save"] == job.checkpoint["load"] == "/c" and job.checkpoint["ckpt_format"] == "torch_dist"
    assert job.seq_length == cfg["sft"]["dataset"]["seq_length"] and job.packed_sequence


def test_impossible_layouts_are_refused_before_the_cluster_sees_them():
    with pytest.raises(TranslationError, match="not a multiple of tensor"):
        translate(compose("pretrain"), "pretrain", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=6)
    bad = compose("sft", ["sft.train.global_batch_size=100"])
    with pytest.raises(TranslationError, match="global_batch_size 100"):
        translate(bad, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32)
    sp = compose("sft", ["sft.model.sequence_parallel=true", "sft.model.tensor_model_parallel_size=1"])
    with pytest.raises(TranslationError, match="sequence_parallel"):
        translate(sp, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32)


def test_pretrain_override_flows_through():
    cfg = compose("pretrain", ["pretrain.model.tensor_model_parallel_size=8", "pretrain.train.train_iters=5"])
    job = translate(cfg, "pretrain", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=64)
    assert job.mode == "pretrain" and job.provider["tensor_model_parallel_size"] == 8 and job.train["train_iters"] == 5
    assert job.hf_model == cfg["base_model"]["hf_model_id"]


def test_rendered_script_is_python_that_uses_the_bridge_api():
    job = translate(compose("sft"), "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32)
    script = render_script(job)
    ast.parse(script)
    for name in ("AutoBridge.from_hf_pretrained", "to_megatron_provider", "ConfigContainer", "finetune", "export_ckpt"):
        assert name in script
    cmd = torchrun_command("/r/s.py", 8, 4, 1, "10.0.0.1", 29500)
    assert cmd[:2] == ["torchrun", "--nproc-per-node=8"] and "--node-rank=1" in cmd
