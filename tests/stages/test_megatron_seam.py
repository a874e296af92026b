"""The Megatron-Bridge seam on plain data: nano3's config -> Bridge's fields, and the rendered script."""
import ast

import pytest

from jobs import recipes
from stages.megatron.config import TranslationError, translate
from stages.megatron.launch import render_script, torchrun_command


@pytest.fixture(scope="module")
def sft_config() -> dict:
    return recipes.compose(recipes.load("nano3"), "sft", [])


def test_nano3_sft_translates_to_bridge_fields(sft_config):
    job = translate(sft_config, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32,
                    hf_model="/store/art_x")
    assert job.mode == "finetune" and job.hf_model == "/store/art_x"
    assert (job.parallel.tensor_model_parallel_size, job.parallel.expert_model_parallel_size) == (4, 8)
    assert job.training.global_batch_size == 256 and job.training.micro_batch_size == 1
    assert job.optimizer.lr == 1e-5 and job.optimizer.bf16 and job.optimizer.optimizer == "adam"
    assert job.scheduler.lr_decay_style == "cosine" and job.scheduler.lr_warmup_iters == 50
    assert job.checkpoint.ckpt_format == "torch_dist" and job.checkpoint.save_interval == 200
    assert job.packed_sequence


def test_impossible_layouts_are_refused_before_the_cluster_sees_them(sft_config):
    with pytest.raises(TranslationError, match="not a multiple of tensor"):
        translate(sft_config, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=6)
    bad = recipes.compose(recipes.load("nano3"), "sft", ["sft.global_batch_size=100"])
    with pytest.raises(TranslationError, match="global_batch_size 100"):
        translate(bad, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32)


def test_pretrain_override_flows_through(sft_config):
    cfg = recipes.compose(recipes.load("nano3"), "pretrain", ["parallel.tensor=8", "pretrain.train_iters=5"])
    job = translate(cfg, "pretrain", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=64)
    assert job.mode == "pretrain" and job.parallel.tensor_model_parallel_size == 8 and job.training.train_iters == 5


def test_rendered_script_is_python_that_uses_the_bridge_api(sft_config):
    job = translate(sft_config, "sft", data_path="/d", checkpoint_dir="/c", export_dir="/e", gpus=32)
    script = render_script(job)
    ast.parse(script)
    for name in ("AutoBridge.from_hf_pretrained", "to_megatron_provider", "ConfigContainer", "finetune", "export_ckpt"):
        assert name in script
    cmd = torchrun_command("/r/s.py", 8, 4, 1, "10.0.0.1", 29500)
    assert cmd[:2] == ["torchrun", "--nproc-per-node=8"] and "--node-rank=1" in cmd
