"""The tiny model's Megatron-Bridge recipe for dev/bridge_gpu.py: what `pretrain.recipe` /
`sft.recipe` name (`bridge_gpu_recipe:tiny_config`) in place of Nemotron-3-Nano's, and the rendered
bridge_train.py calls with `hf_model=` the HF folder the stage starts from.

Only on the machines dev/bridge_gpu.sh runs on, which have no Transformer Engine: Bridge's own
recipes (megatron.bridge.recipes.*) import it, so this one builds the ConfigContainer itself, with
megatron-core's local layer spec and the fusions that need TE or Apex off (`without_te`). Our
overrides (bridge_overrides.yaml) are applied on top by the rendered script, as for nano3.
"""
from __future__ import annotations

#: Provider flags whose kernels come from Transformer Engine or Apex.
FUSIONS = ("apply_rope_fusion", "gradient_accumulation_fusion", "bias_activation_fusion", "masked_softmax_fusion",
           "persist_layer_norm", "bias_dropout_fusion", "cross_entropy_loss_fusion")


def without_te(provider):
    """A model provider that builds with megatron-core's local (non-TE) layers."""
    from megatron.bridge.models.gpt_provider import local_layer_spec

    provider.transformer_layer_spec = local_layer_spec
    for name in FUSIONS:
        if hasattr(provider, name):
            setattr(provider, name, False)
    return provider


def tiny_config(hf_model: str):
    """A ConfigContainer for the HF model at `hf_model` (its architecture, its tokenizer), bf16 on
    one GPU; train, optimizer, scheduler, checkpoint, logger and dataset are set by our overrides
    (the SFT stage's replaces the dataset section whole, with a FinetuningDatasetConfig)."""
    import torch
    from megatron.bridge import AutoBridge
    from megatron.bridge.training import config as c

    model = without_te(AutoBridge.from_hf_pretrained(hf_model).to_megatron_provider(load_weights=False))
    model.bf16, model.params_dtype, model.pipeline_dtype = True, torch.bfloat16, torch.bfloat16
    model.hidden_dropout = model.attention_dropout = 0.0
    # torch's Adam, not TE's FusedAdam: its distributed-optimizer checkpoint asserts on save
    # (sharded_param_state_dp_reshardable, a scalar `step` per parameter), so the plain optimizer.
    optimizer = c.OptimizerConfig(optimizer="adam", lr=1e-3, bf16=True, use_distributed_optimizer=False)
    ddp = c.DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=False,
                                          overlap_grad_reduce=False, overlap_param_gather=False)
    dataset = c.GPTDatasetConfig(random_seed=1234, sequence_length=model.seq_length, reset_attention_mask=False,
                                 reset_position_ids=False, eod_mask_loss=False, num_dataset_builder_threads=1,
                                 dataloader_type="single")
    return c.ConfigContainer(
        model=model,
        train=c.TrainingConfig(train_iters=1, global_batch_size=1, micro_batch_size=1),
        optimizer=optimizer,
        scheduler=c.SchedulerConfig(lr_decay_style="cosine", lr_warmup_iters=0),
        ddp=ddp,
        dataset=dataset,
        logger=c.LoggerConfig(log_interval=5),
        tokenizer=c.TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=hf_model),
        checkpoint=c.CheckpointConfig(ckpt_format="torch_dist", fully_parallel_save=False),
        rng=c.RNGConfig(seed=1234),
        mixed_precision="bf16_mixed",
    )
