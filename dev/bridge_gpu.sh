#!/usr/bin/env bash
# Megatron-Bridge's own pretrain and finetune loops for the tiny recipe, through our launch path
# (dev/bridge_gpu.py), its output kept as a raw result file by bench/record.py.
#
#   bash dev/bridge_gpu.sh            # a GPU machine: about 5 minutes; a CPU host: the CPU parts, exit 3
#
# Which interpreter:
# - a GPU machine without network (Python 3.12, torch with CUDA, transformers): the wheels in .whl/
#   and .whl/bridge/ (dev/bridge_gpu_pack.sh) go into a scratch folder, and the
#   sources dev/bridge_gpu_pack.sh unpacked into .bridge-src/ go first on the path: Megatron-Bridge
#   nano-v3 (1cedb0a9c) and the megatron-core of NeMo RL's fork (29e426c01), the pair the nemo
#   image carries (containers/containers.lock). Carry both folders with the tree.
# - a CPU host with .venv-bridge (dev/bridge_venv.sh: Bridge 0.3.1, megatron-core 0.16.1): that,
#   with hydra, antlr4 and omegaconf linked from .venv (jobs/recipes.py composes with them) and
#   tests/stages/bridge_cpu.py's Transformer Engine import stand-in (BRIDGE_GPU_TE_STANDIN);
#   BRIDGE_GPU_SOURCES=1 puts .bridge-src/ first, to run the GPU machine's Bridge and megatron-core here.
# PYTHON overrides the choice. dev/bridge_gpu_site/ is first on every process's path: its
# sitecustomize.py makes the HF -> Megatron import build megatron-core's local layers (no TE here).
#
# Exit status: 0 all ran and passed; 3 the CPU parts passed, the GPU part was not run (no CUDA); else
# a failure. The raw file goes to $OUT (default /tmp/bridge_gpu-out), named bridge_gpu-<GPU>-DATE.md;
# bridge_gpu.json beside it. BRIDGE_GPU_TIMEOUT (seconds, default 480) bounds the whole run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/bridge_gpu-out}
site=$(mktemp -d /tmp/bridge_gpu_site.XXXXXX)
path="$root/dev/bridge_gpu_site"
if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
elif [ -d .bridge-src ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    PY=python3
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl .whl/bridge/*.whl
    path="$path:$site:$(echo "$root"/.bridge-src/megatron-lm-*):$(echo "$root"/.bridge-src/megatron-bridge-*/src)"
elif [ -x .venv-bridge/bin/python ]; then
    PY=$root/.venv-bridge/bin/python
    for p in hydra antlr4 omegaconf; do ln -s "$root/.venv/lib/python3.11/site-packages/$p" "$site/$p"; done
    path="$path:$site"
    if [ -n "${BRIDGE_GPU_SOURCES:-}" ]; then     # the GPU machine's Bridge and megatron-core, on this CPU
        path="$path:$(echo "$root"/.bridge-src/megatron-lm-*):$(echo "$root"/.bridge-src/megatron-bridge-*/src)"
    else                                           # nano-v3's training path imports no TE; 0.3.1's does
        export BRIDGE_GPU_TE_STANDIN="$root/tests/stages"
    fi
    export PATH="$root/.venv-bridge/bin:$PATH"      # its torchrun
else
    echo "bridge_gpu: no interpreter: .bridge-src/ with a GPU (dev/bridge_gpu_pack.sh), or .venv-bridge (dev/bridge_venv.sh)" >&2
    exit 1
fi
export PYTHONPATH="$path:$root${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v torchrun > /dev/null; then     # launch.py runs `torchrun`: the interpreter's own
    mkdir -p "$site/bin"
    printf '#!/bin/sh\nexec %s -m torch.distributed.run "$@"\n' "$PY" > "$site/bin/torchrun"
    chmod +x "$site/bin/torchrun"
    export PATH="$site/bin:$PATH"
fi
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} PYTHONUNBUFFERED=1
gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'nogpu')" 2>/dev/null \
      | tr -c 'A-Za-z0-9\n' '_' | tr 'A-Z' 'a-z')
set +e
OUT=$out timeout "${BRIDGE_GPU_TIMEOUT:-480}" "$PY" bench/record.py "bridge_gpu-$gpu" --out "$out" -- "$PY" dev/bridge_gpu.py "$@"
status=$?
rm -rf "$site"
exit $status
