#!/usr/bin/env bash
# Creates .venv-nemo-rl: a CPU twin of the Python that NVIDIA's nemo-rl image (v0.4.0.nemotron_3_nano,
# NeMo RL 823fcc904) runs a job in, its default venv /opt/nemo_rl_venv: every library below at the version
# of that image's own uv.lock (and whatever they pull in, held to the lock too), NeMo RL's source
# from the pinned archive (JOBS_UPSTREAM_MIRROR, default ../shared/upstream; checked against its
# SHA256SUMS), and nothing of ours. The tests run this project's job code in it (tests/twins/).
# What differs from the image: Debian 12's Python 3.11 (the image: uv's 3.12; Debian 12 has no 3.12);
# torch is this machine's CPU build 2.13.0 (the lock's 2.9.0 is a CUDA build: PyPI's wheel pulls ~3 GB of
# CUDA libraries, and no CPU build of 2.9.0 can be fetched here), listed in dev/twin_standins.txt; no vLLM,
# megatron-core, Megatron-Bridge or Transformer Engine (the worker venvs' libraries, not the default one's).
# Idempotent: a second run with this file, dev/twin_lock.py, dev/uv.sh and the archive unchanged only checks the stamp.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-nemo-rl"
mirror=${JOBS_UPSTREAM_MIRROR:-$root/../shared/upstream}
archive=nemo-rl-823fcc904.tar.gz
[ -f "$mirror/$archive" ] || { echo "twin_venv: $mirror/$archive is missing (set JOBS_UPSTREAM_MIRROR)" >&2; exit 1; }
stamp="$venv/.installed-$(cat "$0" "$root/dev/twin_lock.py" "$root/dev/uv.sh" "$mirror/$archive" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
(cd "$mirror" && grep " $archive\$" SHA256SUMS | sha256sum -c --quiet -)
rm -rf "$venv"
python3.11 -m venv "$venv"
src="$venv/nemo-rl"
mkdir -p "$src"
tar -xzf "$mirror/$archive" -C "$src" --strip-components=1
# NeMo RL's Dockerfile runs its drivers from its checkout (/opt/nemo-rl) without installing it.
echo "$src" >"$(echo "$venv"/lib/python3.*/site-packages)/nemo_rl_checkout.pth"
lock="$src/uv.lock"
# What the job's path imports in that Python before the first GPU call: Ray (ray[default], as NeMo RL's
# pyproject.toml), NeMo RL's config loader (omegaconf, hydra-core, pyyaml), tokenizer and data, and
# what examples/run_grpo_math.py imports (measured: each added until the import passed).
packages=("ray[default]" transformers tokenizers huggingface-hub safetensors omegaconf hydra-core pyyaml numpy
          datasets math-verify wandb tensorboard torchdata nvidia-ml-py rich colored accelerate pyzmq uvicorn
          fastapi mlflow swanlab)
. "$root/dev/uv.sh"   # uv_setup: uv, and torch pinned to this machine's CPU build
uv_setup "$venv"
"$venv/bin/python" "$root/dev/twin_lock.py" pins "$lock" "${packages[@]}" >"$venv/requirements.txt"
"$venv/bin/python" "$root/dev/twin_lock.py" constraints "$lock" >"$venv/constraints.txt"
"${uv[@]}" -r "$venv/requirements.txt" -c "$venv/constraints.txt" torch
"$venv/bin/python" "$root/dev/twin_lock.py" check "$lock" "$venv/bin/python" "${packages[@]}"
printf '%s\n' "${packages[@]}" >"$venv/packages.txt"
rm -f "$venv"/.installed-*
touch "$stamp"
