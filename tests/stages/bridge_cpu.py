"""CPU answers for Megatron-Bridge 0.3.1 (and nano-v3 from source, dev/bridge_nano_v3.py) in .venv-bridge:
tests and dev scripts only, never in stages/.

Each stand-in is listed in stages/backends/megatron/README.md ("What runs on CPU"). Import this module
before megatron.bridge: megatron.core is imported first, so it still sees no Transformer Engine.
"""
import sys
import types

import importlib

import megatron.core  # noqa: F401  (first: its TE detection must find none)

# megatron.core modules lora_layers' imports would otherwise load while the stand-in is present
# (they would then believe TE is installed: HAVE_TE True). Imported first, without it.
for _name in ("megatron.core.models.gpt.gpt_model", "megatron.core.models.gpt.gpt_layer_specs",
              "megatron.core.models.mamba", "megatron.core.transformer.custom_layers.transformer_engine",
              "megatron.core.extensions.transformer_engine_spec_provider", "megatron.core.extensions.kitchen",
              "megatron.core.transformer.moe.moe_layer", "megatron.core.models.T5", "megatron.core.models.multimodal.llava_model",
              "megatron.core.models.vision.radio", "megatron.core.models.vision.vit_layer_specs",
              "megatron.core.models.mamba.mamba_layer_specs",
              "megatron.core.models.gpt.heterogeneous.heterogeneous_layer_specs",
              "megatron.core.models.gpt.experimental_attention_variant_module_specs",
              "megatron.core.post_training.modelopt.gpt.model_specs", "megatron.core.post_training.modelopt.mamba.model_specs",
              "megatron.core.ssm.mamba_block", "megatron.core.ssm.gated_delta_net",
              "megatron.core.inference.contexts.attention_context.triton.tensor_ops",
              "megatron.core.transformer.heterogeneous.linear_replacements"):
    importlib.import_module(_name)


def _stand_in_transformer_engine() -> None:
    """megatron/bridge/peft/lora_layers.py (and, in Bridge's nano-v3 branch, peft/lora.py) import
    transformer_engine.pytorch unconditionally; only names are needed at import (LoRA is never used here)."""
    class _Meta(type):
        def __getattr__(cls, name):          # te.ops.Sequential in annotations
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (_Missing,), {})

    class _Missing(metaclass=_Meta):
        def __init__(self, *a, **k):
            raise RuntimeError("Transformer Engine stand-in: not usable on CPU")

    def attr(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (_Missing,), {})

    te = types.ModuleType("transformer_engine")
    te_pt = types.ModuleType("transformer_engine.pytorch")
    te_pt.__getattr__ = attr
    te.pytorch = te_pt
    before = set(sys.modules)
    sys.modules["transformer_engine"], sys.modules["transformer_engine.pytorch"] = te, te_pt
    try:
        import megatron.bridge.peft.lora_layers  # noqa: F401
        import megatron.bridge.peft.lora  # noqa: F401
    finally:
        del sys.modules["transformer_engine"], sys.modules["transformer_engine.pytorch"]
    leaked = sorted(m for m in set(sys.modules) - before if m.startswith("megatron.core"))
    if leaked:   # they saw the stand-in: add them to the list above
        raise RuntimeError(f"megatron.core modules imported beside the TE stand-in: {leaked}")


_stand_in_transformer_engine()

#: Set on top of our overrides for a CPU validate(): the recipe's MoE dispatcher needs CUDA kernels.
def catch_skipped() -> list[str]:
    """The messages Bridge logs when it drops an override (an unknown key never fails there): a list
    that fills while the config is built."""
    import logging

    skipped: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "Skipping" in msg or "Failed to instantiate" in msg or "Could not set" in msg:
                skipped.append(msg)

    logging.getLogger().addHandler(Catch())
    return skipped


CPU_MOE = {"moe_permute_fusion": False, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None}


def answer_cuda_queries() -> list[str]:
    """The unguarded torch.cuda calls Bridge 0.3.1 / megatron-core 0.16.1 make on the paths the
    tests run, answered for a CPU process; returns what was patched (README lists each call)."""
    import torch

    torch.cuda.get_rng_state = lambda *a, **k: torch.zeros(16, dtype=torch.uint8)   # bridge/training/checkpointing.py
    torch.cuda.synchronize = lambda *a, **k: None          # core/dist_checkpointing/strategies/filesystem_async.py
    torch.cuda.current_device = lambda: "cpu"              # core/dist_checkpointing/strategies/state_dict_saver.py,
    #                                                        core/utils.py, rotary_pos_embedding.py
    return ["torch.cuda.get_rng_state", "torch.cuda.synchronize", "torch.cuda.current_device"]


def single_process_group() -> None:
    """gloo, world size 1, and megatron-core's model-parallel state (needs no CUDA)."""
    import os

    import torch
    from megatron.core import parallel_state

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
