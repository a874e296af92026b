"""A Megatron model of an HF checkpoint on CPU, by Bridge's own conversion: megatron-core's local (non-TE)
layer spec and every fusion off, since those need Transformer Engine or CUDA kernels. Tests and their
scripts only (tests/stages/bridge_roundtrip.py in .venv-bridge, tests/twins/nemo_rl_megatron_step.py in the
nemo-rl Megatron worker twin); imports nothing at module level, so either Python can load it."""

FUSIONS = ("apply_rope_fusion", "gradient_accumulation_fusion", "bias_activation_fusion", "masked_softmax_fusion",
           "persist_layer_norm", "bias_dropout_fusion", "bf16", "fp16")


def cpu_model(hf: str):
    """(AutoBridge of `hf`, its Megatron model list) in float32, built on CPU with the HF weights loaded."""
    import torch
    from megatron.bridge import AutoBridge
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    bridge = AutoBridge.from_hf_pretrained(hf, torch_dtype=torch.float32)
    provider = bridge.to_megatron_provider(load_weights=True)
    provider.transformer_layer_spec = get_gpt_layer_local_spec()
    for k in FUSIONS:
        if hasattr(provider, k):
            setattr(provider, k, False)
    provider.params_dtype = torch.float32
    provider.finalize()
    return bridge, provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
