"""Execute nano3's pretrain and SFT configuration against Megatron-Bridge's nano-v3 branch (the Bridge
the nemo:25.11.nemotron_3_nano image carries) from a checkout, with the megatron-core in .venv-bridge
(PyPI 0.16.1, which contains Megatron-LM f7dfb9979, the rule the image's megatron-core must have).

CI cannot: nano-v3 is a branch, not a PyPI release (PyPI's newest for Python 3.11 is Bridge 0.3.1,
which tests/stages/test_bridge_real.py runs). This script is run by hand, on a machine that has the
branch (its `src/` folder is enough), and what it prints is recorded in stages/backends/megatron/README.md:

    git -C MEGATRON_BRIDGE_CLONE archive 1cedb0a9c src | tar -x -C /tmp/bridge-nano-v3
    PYTHONPATH=. .venv/bin/python dev/bridge_nano_v3.py /tmp/bridge-nano-v3

For each stage: our overrides rendered for nano-v3 at nano3's GPU count, written as the stage writes
them (bridge_overrides.yaml, bridge_train.py), then in .venv-bridge with the checkout's src first on
the path: the rendered script's own config() (the nano-v3 recipe + our overrides, strictly applied),
the CPU-only MoE dispatcher values (tests/stages/bridge_cpu.py), ConfigContainer.validate().
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "stages"))

VALIDATE = r"""
import importlib.util, json, sys
bridge_src, helpers, script_path = sys.argv[1:4]
sys.path.insert(0, bridge_src)
sys.path.insert(1, helpers)
import megatron.core
import megatron.bridge   # before the TE stand-in: nano-v3's model providers probe for TE at import (HAVE_TE)
import bridge_cpu
skipped = bridge_cpu.catch_skipped()
spec = importlib.util.spec_from_file_location("bridge_train", script_path)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
cfg = script.config()
for k, v in bridge_cpu.CPU_MOE.items():
    setattr(cfg.model, k, v)
error = None
try:
    cfg.validate()
except Exception as e:
    error = f"{type(e).__name__}: {e}"
d = cfg.dataset
print(json.dumps({
    "bridge": megatron.bridge.__file__, "megatron_core": megatron.core.__version__, "validate": error or "passed",
    "skipped": skipped, "peft": type(cfg.peft).__name__ if cfg.peft is not None else None,
    "dataset": type(d).__name__, "mock": getattr(d, "mock", None), "blend": getattr(d, "blend", None),
    "blend_per_split": getattr(d, "blend_per_split", None), "dataset_root": str(getattr(d, "dataset_root", None)),
    "packed": type(getattr(d, "packed_sequence_specs", None)).__name__,
    "tp": cfg.model.tensor_model_parallel_size, "num_query_groups": cfg.model.num_query_groups,
    "ep": cfg.model.expert_model_parallel_size, "gbs": cfg.train.global_batch_size, "lr": cfg.optimizer.lr,
    "seq": cfg.model.seq_length, "load": cfg.checkpoint.load, "eval_interval": cfg.train.eval_interval,
}, default=str))
"""


def main(checkout: str) -> int:
    from test_bridge_real import rendered   # the same inputs the 0.3.1 test renders for

    src = Path(checkout) / "src"
    if not (src / "megatron" / "bridge" / "recipes" / "nemotronh" / "nemotron_3_nano.py").is_file():
        sys.exit(f"{checkout}: no src/megatron/bridge/recipes/nemotronh/nemotron_3_nano.py (a nano-v3 checkout?)")
    py = ROOT / ".venv-bridge" / "bin" / "python"
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for stage in ("pretrain", "sft"):
            where = Path(tmp) / stage
            where.mkdir()
            job, script, world = rendered(where, stage, version="nano-v3")
            env = {**os.environ, "WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""}
            p = subprocess.run([str(py), "-c", VALIDATE, str(src), str(ROOT / "tests" / "stages"), str(script)],
                               capture_output=True, text=True, env=env, timeout=1800)
            if p.returncode:
                print(f"{stage}: exit {p.returncode}\n{p.stderr[-3000:]}")
                failed += 1
                continue
            out = json.loads(p.stdout.strip().splitlines()[-1])
            out["recipe"] = f"{job.recipe}(**{job.recipe_kwargs})"
            print(f"{stage} ({world} GPUs): " + json.dumps(out, default=str))
            failed += out["validate"] != "passed" or bool(out["skipped"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
