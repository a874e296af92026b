#!/usr/bin/env bash
# Creates .venv-bridge: megatron-core 0.16.1 + megatron-bridge 0.3.1 on CPU, for
# tests/stages/test_bridge_real.py (AutoBridge round trip, recipe + our overrides -> validate()) and
# dev/bridge_gpu.sh's CPU mode (tests/stages/test_bridge_gpu.py: Bridge's pretrain()/finetune() up to
# their CUDA check).
# A separate venv because Bridge 0.3.1 needs transformers<5 and huggingface-hub<1, the project
# venv has transformers 5. Bridge >= 0.4 needs Python >= 3.12, which these machines lack.
# Idempotent: a second run with this file and dev/uv.sh unchanged only checks the stamp.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-bridge"
stamp="$venv/.installed-$(cat "$0" "$root/dev/uv.sh" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
python3.11 -m venv "$venv"
. "$root/dev/uv.sh"   # uv_setup: uv, and torch pinned to the CPU build
uv_setup "$venv"
# Both with --no-deps: their declared dependencies include Transformer Engine and other CUDA-only
# packages. The rest is the smallest set the tests' paths import (measured by removing each):
# transformers/huggingface-hub at Bridge 0.3.1's pins (<5, <1.0), installed in the same command
# so datasets resolves to a version that works with that hub; triton (megatron-core's Mamba code
# imports it at load); datasets, megatron-energon, nvidia-modelopt, omegaconf, einops (imported by
# megatron.bridge at module level); tensorboard (checkpoint saving). Not needed here: hydra-core,
# accelerate. nvidia-resiliency-ext (0.4.1: the newest with a cp311 wheel) and what its `inprocess`
# imports (defusedxml, nvidia-ml-py, psutil): megatron.bridge.training.pretrain imports it at load.
"${uv[@]}" --no-deps megatron-core==0.16.1 megatron-bridge==0.3.1 nvidia-resiliency-ext==0.4.1
# datasets>=5: left open, uv takes fsspec's newest and so datasets 2.14, which fails on today's pyarrow.
"${uv[@]}" torch==2.13.0 transformers==4.57.6 huggingface-hub==0.36.2 triton "datasets>=5" megatron-energon \
  nvidia-modelopt omegaconf tensorboard einops pyyaml defusedxml nvidia-ml-py psutil
"$venv/bin/python" - <<'EOF'
import torch, transformers
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert transformers.__version__ == "4.57.6", transformers.__version__
import importlib.util
import megatron.core  # noqa: F401  (megatron.bridge itself imports Transformer Engine: tests stand in for it)
assert importlib.util.find_spec("megatron.bridge") is not None
EOF
rm -f "$venv"/.installed-*
touch "$stamp"
