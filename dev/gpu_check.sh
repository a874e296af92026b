#!/usr/bin/env bash
# GPU smoke check (dev/gpu_check.py): the tiny pretrain, SFT and GRPO stages on CUDA through the
# project's own loops, with held-out eval, a one-rank NCCL group, and a table of what ran where.
#
# On a GPU machine without network: the wheels dev/gpu_wheels.sh put in .whl/ are installed into a
# scratch folder first (hydra-core, omegaconf, antlr4; torch and transformers are the machine's).
#   bash dev/gpu_check.sh                                         # full step counts, device cuda
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=tiny bash dev/gpu_check.sh   # the same path on a CPU, a few steps
# PYTHON picks the interpreter (default python3); $OUT, when set, receives gpu_check.txt and .json.
# GPU_CHECK_TIMEOUT (seconds, default 420) bounds the whole check.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
    site=$(mktemp -d /tmp/gpu_check_site.XXXXXX)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}   # deterministic cuBLAS, before CUDA starts
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec timeout "${GPU_CHECK_TIMEOUT:-420}" "$PY" dev/gpu_check.py "$@"
