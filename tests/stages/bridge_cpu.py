"""CPU answers for Megatron-Bridge 0.3.1 in .venv-bridge: tests only, never in stages/.

Each stand-in is listed in stages/megatron/README.md ("What runs on CPU"). Import this module
before megatron.bridge: megatron.core is imported first, so it still sees no Transformer Engine.
"""
import sys
import types

import megatron.core  # noqa: F401  (first: its TE detection must find none)


def _stand_in_transformer_engine() -> None:
    """megatron/bridge/peft/lora_layers.py imports transformer_engine.pytorch unconditionally; only
    names are needed at import (LoRA is never used here)."""
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
    sys.modules["transformer_engine"], sys.modules["transformer_engine.pytorch"] = te, te_pt
    import megatron.bridge.peft.lora_layers  # noqa: F401
    del sys.modules["transformer_engine"], sys.modules["transformer_engine.pytorch"]


_stand_in_transformer_engine()

#: Set on top of our overrides for a CPU validate(): the recipe's MoE dispatcher needs CUDA kernels.
CPU_MOE = {"moe_permute_fusion": False, "moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None}
