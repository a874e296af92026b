#!/usr/bin/env bash
# The wheels dev/gpu_check.sh installs on a GPU machine without network, into .whl/ (git-ignored).
#
# That machine has Python 3.12 with torch (CUDA), transformers, tokenizers, safetensors, numpy, pyyaml
# and tensorboard; the check also needs what composes the tiny recipe's configs (jobs/recipes.py):
# hydra-core and omegaconf at the versions this project pins, and antlr4-python3-runtime 4.9.3, which
# hydra 1.3 requires and PyPI has only as a source archive (built here into a pure-Python wheel).
# Ray is not carried: its cp312 wheel alone is 76 MiB, over what travels with the tree (64 MiB), so
# the check runs the rl stage's actors in process (rl.cluster.actors=local).
#
# Usage: dev/gpu_wheels.sh [PYTHON]     (PYTHON builds the antlr4 wheel; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
mkdir -p .whl
rm -f .whl/*.whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl hydra-core==1.3.8 omegaconf==2.3.1
"$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
ls -l .whl
du -ch .whl/*.whl | tail -1
