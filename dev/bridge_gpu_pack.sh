#!/usr/bin/env bash
# What dev/bridge_gpu.sh needs on a GPU machine without network (Python 3.12, torch with CUDA,
# transformers, numpy, einops, tensorboard, safetensors), into two git-ignored folders that travel
# with the tree (about 30 MB together):
#   .whl/         dev/gpu_wheels.sh's (hydra-core, omegaconf, antlr4); in .whl/bridge/ (apart, so that
#                 dev/gpu_check.sh does not install them) the cp312 wheels Bridge's pretrain and
#                 finetune import: datasets, dill, multiprocess, xxhash, pydantic (+core,
#                 annotated-types, typing-inspection), nvidia-modelopt, nvidia-resiliency-ext,
#                 pulp<4, defusedxml;
#   .bridge-src/  Megatron-Bridge nano-v3 (1cedb0a9c) and megatron-core from NeMo RL's fork
#                 (29e426c01), the pair containers/containers.lock names for the nemo image, unpacked
#                 from UPSTREAM (checked against its SHA256SUMS), plus megatron-core's compiled
#                 dataset helper (helpers_cpp) from the megatron-core 0.16.1 wheel, which the source
#                 tree would otherwise build with make and pybind11 at run time.
#
# Usage: dev/bridge_gpu_pack.sh [UPSTREAM] [PYTHON]   (UPSTREAM default ../shared/upstream; PYTHON python3)
set -euo pipefail
cd "$(dirname "$0")/.."
UPSTREAM=$(cd "${1:-../shared/upstream}" && pwd)
PY=${2:-python3}
bash dev/gpu_wheels.sh "$PY"
py312=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_39_x86_64
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
rm -rf .whl/bridge
"$PY" -m pip download -q "${py312[@]}" -d .whl/bridge datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 nvidia-modelopt==0.47.0 \
    nvidia-resiliency-ext==0.7.0 "pulp<4" defusedxml==0.7.1
rm -rf .bridge-src
mkdir -p .bridge-src
(cd "$UPSTREAM" && grep -E " (megatron-bridge-1cedb0a9c|megatron-lm-29e426c01)\.tar\.gz$" SHA256SUMS | sha256sum -c --quiet)
tar -xzf "$UPSTREAM/megatron-bridge-1cedb0a9c.tar.gz" -C .bridge-src
tar -xzf "$UPSTREAM/megatron-lm-29e426c01.tar.gz" -C .bridge-src
core=$(mktemp -d)
trap 'rm -rf "$core"' EXIT
"$PY" -m pip download -q "${py312[@]}" -d "$core" megatron-core==0.16.1
"$PY" -m zipfile -e "$core"/megatron_core-*.whl "$core/x"
cp "$core"/x/megatron/core/datasets/helpers_cpp.cpython-312-*.so .bridge-src/megatron-lm-29e426c01/megatron/core/datasets/
du -sh .whl .bridge-src
