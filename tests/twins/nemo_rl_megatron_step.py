"""Runs in the nemo-rl image's Megatron worker twin (.venv-nemo-rl-mcore): a step of NeMo RL's checkpoint
layout, as its Megatron policy worker leaves one, from a toy HF model: STEP/policy/weights/iter_0000000 (the
model through that Python's own Megatron-Bridge 079d5a94e and megatron-core 29e426c01: AutoBridge's
conversion, megatron-core's non-TE layer spec, save_megatron_model) and STEP/config.yaml (the run's config,
of which the converter reads policy.model_name and policy.tokenizer.name). The CPU answers to megatron-core's
unguarded CUDA queries are tests/stages/bridge_cpu.py's answer_cuda_queries, as the real-Bridge round trip
uses them (that module's Transformer Engine stand-in is for Bridge 0.3.1's imports: this Bridge's path here
imports no TE). Usage: HF_DIR STEP."""
import os
import sys
from pathlib import Path

import torch
import yaml

CUDA_ANSWERS = {"get_rng_state": lambda *a, **k: torch.zeros(16, dtype=torch.uint8),   # bridge_cpu.answer_cuda_queries
                "synchronize": lambda *a, **k: None, "current_device": lambda: "cpu"}


def main():
    hf, step = sys.argv[1], Path(sys.argv[2])
    for name, answer in CUDA_ANSWERS.items():
        setattr(torch.cuda, name, answer)
    from megatron.core import parallel_state

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    from megatron.bridge import AutoBridge
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    bridge = AutoBridge.from_hf_pretrained(hf, torch_dtype=torch.float32)
    provider = bridge.to_megatron_provider(load_weights=True)
    provider.transformer_layer_spec = get_gpt_layer_local_spec()
    for k in ("apply_rope_fusion", "gradient_accumulation_fusion", "bias_activation_fusion", "masked_softmax_fusion",
              "persist_layer_norm", "bias_dropout_fusion", "bf16", "fp16"):
        if hasattr(provider, k):
            setattr(provider, k, False)
    provider.params_dtype = torch.float32
    provider.finalize()
    mm = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
    weights = step / "policy" / "weights"
    bridge.save_megatron_model(mm, str(weights))
    (step / "config.yaml").write_text(yaml.safe_dump({"policy": {"model_name": hf, "tokenizer": {"name": hf},
                                                                 "megatron_cfg": {"enabled": True}}}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    main()
