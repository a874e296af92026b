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

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from megatron_local import cpu_model  # noqa: E402

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
    bridge, mm = cpu_model(hf)
    weights = step / "policy" / "weights"
    bridge.save_megatron_model(mm, str(weights))
    (step / "config.yaml").write_text(yaml.safe_dump({"policy": {"model_name": hf, "tokenizer": {"name": hf},
                                                                 "megatron_cfg": {"enabled": True}}}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    main()
