#!/usr/bin/env bash
# Creates a CPU twin of the Python that one of NVIDIA's images runs a job in: every library the job's path
# imports there at the version of that image's own uv.lock (and whatever they pull in, held to the lock
# too: dev/twin_lock.py), NVIDIA's sources from the pinned archives (JOBS_UPSTREAM_MIRROR, default
# ../shared/upstream; checked against its SHA256SUMS) on the path as the image has them, and nothing of
# ours. The tests run this project's job code in it (tests/twins/).
#
#   dev/twin_venv.sh [nemo-rl]   .venv-nemo-rl: nvcr.io/nvidia/nemo-rl:v0.4.0.nemotron_3_nano's default venv
#                                (/opt/nemo_rl_venv), NeMo RL 823fcc904
#   dev/twin_venv.sh nemo        .venv-nemo: nvcr.io/nvidia/nemo:25.11.nemotron_3_nano's /opt/venv,
#                                Megatron-Bridge 1cedb0a9c (nano-v3) and megatron-core terrykong/Megatron-LM@29e426c01
#   dev/twin_venv.sh nemo-rl-vllm   .venv-nemo-rl-vllm: the same nemo-rl image's vLLM worker venv
#                                (/opt/ray_venvs/nemo_rl.models.generation.vllm.vllm_worker.VllmGenerationWorker,
#                                run as /usr/local/bin/python-VllmGenerationWorker), NeMo RL 823fcc904
#   dev/twin_venv.sh nemo-rl-mcore  .venv-nemo-rl-mcore: the same image's Megatron policy worker venv
#                                (/opt/ray_venvs/nemo_rl.models.policy.workers.megatron_policy_worker.MegatronPolicyWorker,
#                                run as /usr/local/bin/python-MegatronPolicyWorker), NeMo RL 823fcc904 with its
#                                Megatron-Bridge 079d5a94e and megatron-core terrykong/Megatron-LM@29e426c01
#   dev/twin_venv.sh nemotron    .venv-nemotron: the Python Nemotron e27b371's nano3 data prep runs in
#                                (its runspec: anyscale/ray:2.49.2-py312, `uv run --extra xenna`); the kit ships
#                                no lock, so its versions are dev/twin_nemotron.txt's, not an upstream lock's
#
# What differs from the images: Debian 12's Python 3.11 (the images: 3.12; Debian 12 has no 3.12); torch
# is this machine's CPU build 2.13.0 (the locks' 2.9.0 is a CUDA build: PyPI's wheel pulls ~3 GB of CUDA
# libraries, and no CPU build of 2.9.0 can be fetched here). Each stand-in or absence is a row of
# dev/twin_standins.txt, with its reason.
# Idempotent: a second run with this file, dev/twin_lock.py, dev/uv.sh and the archives unchanged only checks the stamp.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
twin=${1:-nemo-rl}
mirror=${JOBS_UPSTREAM_MIRROR:-$root/../shared/upstream}
case "$twin" in
  nemo-rl)
    # NeMo RL's Dockerfile runs its drivers from its checkout (/opt/nemo-rl) without installing it. No vLLM,
    # megatron-core, Megatron-Bridge or Transformer Engine: the worker venvs' libraries, not the default one's.
    archives=(nemo-rl-823fcc904.tar.gz)
    checkouts=(nemo-rl)
    on_path=(nemo-rl)
    lock=nemo-rl/uv.lock
    # What the job's path imports in that Python before the first GPU call: Ray (ray[default], as NeMo RL's
    # pyproject.toml), NeMo RL's config loader (omegaconf, hydra-core, pyyaml), tokenizer and data, and
    # what examples/run_grpo_math.py imports (measured: each added until the import passed).
    packages=("ray[default]" transformers tokenizers huggingface-hub safetensors omegaconf hydra-core pyyaml numpy
              datasets math-verify wandb tensorboard torchdata nvidia-ml-py rich colored accelerate pyzmq uvicorn
              fastapi mlflow swanlab)
    extra=()
    absent=()
    held=()
    ;;
  nemo-rl-vllm)
    # The image's prefetch_venvs.py builds one venv per Ray actor class under NEMO_RL_VENV_DIR (/opt/ray_venvs)
    # with `uv sync --locked --extra vllm` in /opt/nemo-rl (NeMo RL installed editable: its checkout on the
    # path) and writes /usr/local/bin/python-<class> to run it: python-VllmGenerationWorker is eval's
    # vllm_python. vLLM 0.11.2's only wheel is a CUDA build: its compiled ops (vllm._C) do not load against
    # the CPU torch, which vLLM itself tolerates at import (a warning); it then finds no platform.
    archives=(nemo-rl-823fcc904.tar.gz)
    checkouts=(nemo-rl)
    on_path=(nemo-rl)
    lock=nemo-rl/uv.lock
    # What an eval engine process imports (stages/eval.py _engine_process: torch, `from vllm import LLM,
    # SamplingParams`, LLM(...) up to its platform check). vllm alone pulled in all of it (measured: the
    # engine ran to vLLM's device check), the rest held to the lock by the constraints; the others are named
    # so that the version check covers what the engine's path imports directly.
    packages=(vllm transformers tokenizers huggingface-hub safetensors numpy)
    extra=()
    # vLLM's wheel asks for them (torchvision, torchaudio, xformers, flashinfer-python at CUDA builds for
    # torch 2.9.0): kept out, dev/twin_standins.txt says why each.
    absent=(torchvision torchaudio xformers flashinfer-python)
    # vLLM's wheel pins torch==2.9.0: held to this machine's CPU build like every twin's torch. The lock
    # holds triton at two versions (3.4.0, 3.5.0: no constraint); torch 2.9.0 on x86_64 Linux, the image's,
    # takes 3.5.0, and without the hold xgrammar pulls the newest.
    held=(torch==2.13.0 triton==3.5.0)
    ;;
  nemo-rl-mcore)
    # prefetch_venvs.py's venv for the Megatron policy worker: `uv sync --locked --extra mcore` in /opt/nemo-rl,
    # which installs NeMo RL, its Megatron-Bridge and Megatron-LM submodules (3rdparty/*-workspace) editable:
    # the three trees on the path, where the image's checkout has them. The extra's Transformer Engine,
    # flash-attn and vLLM are CUDA builds: absent (dev/twin_standins.txt); nothing of the extra's own pulls
    # them in here, since the two workspaces are on the path, not installed.
    archives=(nemo-rl-823fcc904.tar.gz megatron-bridge-079d5a94e.tar.gz megatron-lm-29e426c01.tar.gz)
    checkouts=(nemo-rl nemo-rl/3rdparty/Megatron-Bridge-workspace/Megatron-Bridge nemo-rl/3rdparty/Megatron-LM-workspace/Megatron-LM)
    on_path=(nemo-rl nemo-rl/3rdparty/Megatron-Bridge-workspace/Megatron-Bridge/src nemo-rl/3rdparty/Megatron-LM-workspace/Megatron-LM)
    lock=nemo-rl/uv.lock
    # What NeMo RL's Megatron -> HF converter imports (examples/converters/convert_megatron_to_hf.py:
    # nemo_rl.models.megatron.community_import, megatron.bridge's AutoBridge and training.model_load_save,
    # megatron-core's dist checkpointing): the default venv's libraries, which the extra keeps, and the
    # registry packages of the two workspaces' own dependencies (the lock's megatron-bridge and megatron-core).
    packages=("ray[default]" transformers tokenizers huggingface-hub safetensors omegaconf hydra-core pyyaml numpy
              datasets math-verify wandb tensorboard torchdata nvidia-ml-py rich colored accelerate pyzmq uvicorn
              fastapi mlflow swanlab einops six regex tqdm packaging sentencepiece tiktoken nvidia-modelopt
              nvidia-resiliency-ext qwen-vl-utils wrapt zarr nltk flask-restful)
    extra=()
    # NeMo RL's own dependencies ask for it, a build for the CUDA torch: kept out (dev/twin_standins.txt).
    absent=(torchvision)
    held=()
    ;;
  nemo)
    # The image's layout (Megatron-Bridge's docker/Dockerfile.ci): NVIDIA's PyTorch image (torch from its
    # system Python), /opt/venv made with --system-site-packages and `uv sync --locked --all-extras
    # --all-groups` from /opt/Megatron-Bridge, which installs Bridge editable (its src/ on the path) and
    # megatron-core from 3rdparty/Megatron-LM. The twin matches: Bridge's src/ and the Megatron-LM tree on
    # the path by a .pth, as the editable install has them; VIRTUAL_ENV and PATH are the venv's own.
    archives=(megatron-bridge-1cedb0a9c.tar.gz megatron-lm-29e426c01.tar.gz)
    checkouts=(Megatron-Bridge Megatron-LM)
    on_path=(Megatron-Bridge/src Megatron-LM)
    lock=Megatron-Bridge/uv.lock
    # What the job's path imports there: the rendered scripts' Ray-free path (AutoBridge, Bridge's
    # training/pretrain.py and finetune.py, gpt_step, the Nano-3 recipes) and what those import at module
    # level (measured: each added until `import megatron.bridge.training.pretrain` and the recipe passed),
    # plus ray, which Bridge's lock holds too. Not here: Transformer Engine, mamba-ssm, causal-conv1d and
    # the other CUDA builds (dev/twin_standins.txt).
    packages=("ray[default]" transformers tokenizers huggingface-hub safetensors omegaconf hydra-core pyyaml numpy
              datasets einops tensorboard wandb rich six regex tqdm packaging sentencepiece tiktoken nvidia-modelopt)
    # In the lock from git, not PyPI: PyPI's release of the same version (dev/twin_standins.txt).
    extra=(nvidia-resiliency-ext==0.4.1)
    # Kept out as Bridge's own pyproject does (override-dependencies: the image takes it from NVIDIA's
    # PyTorch base): PyPI's build is for the CUDA torch, and transformers fails at import with it.
    absent=(torchvision)
    held=()
    ;;
  nemotron)
    # Nemotron's kit runs from its checkout (the runspec syncs the repository to the worker): src/ on the
    # path, nemotron and nemo_runspec as its data_prep.py imports them. No uv.lock in the archive: what is
    # installed is dev/twin_nemotron.txt, every distribution at one version, held exactly (no torch: the
    # data prep is a CPU program and imports none).
    archives=(nemotron-e27b371.tar.gz)
    checkouts=(Nemotron)
    on_path=(Nemotron/src)
    lock=
    pinned="$root/dev/twin_nemotron.txt"
    ;;
  *) echo "twin_venv: no twin of image $twin (nemo-rl, nemo-rl-vllm, nemo-rl-mcore, nemo, nemotron)" >&2; exit 2 ;;
esac
venv="$root/.venv-$twin"
for a in "${archives[@]}"; do
  [ -f "$mirror/$a" ] || { echo "twin_venv: $mirror/$a is missing (set JOBS_UPSTREAM_MIRROR)" >&2; exit 1; }
done
stamp="$venv/.installed-$(cat "$0" "$root/dev/twin_lock.py" "$root/dev/uv.sh" ${pinned:+"$pinned"} "${archives[@]/#/$mirror/}" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
for a in "${archives[@]}"; do (cd "$mirror" && grep " $a\$" SHA256SUMS | sha256sum -c --quiet -); done
rm -rf "$venv"
python3.11 -m venv "$venv"
for i in "${!archives[@]}"; do
  mkdir -p "$venv/${checkouts[$i]}"
  tar -xzf "$mirror/${archives[$i]}" -C "$venv/${checkouts[$i]}" --strip-components=1
done
printf "$venv/%s\n" "${on_path[@]}" >"$(echo "$venv"/lib/python3.*/site-packages)/${twin//-/_}_checkout.pth"
. "$root/dev/uv.sh"   # uv_setup: uv, and torch pinned to this machine's CPU build
uv_setup "$venv"
if [ -z "$lock" ]; then
  # Without a lock: the pinned list, nothing else (pip's and setuptools' own aside); exactly it, or the set-up fails.
  "${uv[@]}" -r "$pinned"
  diff <(grep -v '^#' "$pinned" | sort) <("$venv/bin/uv" pip freeze --python "$venv/bin/python" | grep -viE '^(pip|setuptools|uv)==' | sort)
  rm -f "$venv"/.installed-*
  touch "$stamp"
  exit 0
fi
lock="$venv/$lock"
"$venv/bin/python" "$root/dev/twin_lock.py" pins "$lock" "${packages[@]}" >"$venv/requirements.txt"
"$venv/bin/python" "$root/dev/twin_lock.py" constraints "$lock" torch "${absent[@]}" >"$venv/constraints.txt"
{ for name in "${absent[@]}"; do echo "$name; sys_platform == 'never'"; done; [ ${#held[@]} = 0 ] || printf '%s\n' "${held[@]}"; } >"$venv/overrides.txt"
"${uv[@]}" -r "$venv/requirements.txt" -c "$venv/constraints.txt" --overrides "$venv/overrides.txt" torch "${extra[@]}"
"$venv/bin/python" "$root/dev/twin_lock.py" check "$lock" "$venv/bin/python" "${packages[@]}"
printf '%s\n' "${packages[@]}" >"$venv/packages.txt"
rm -f "$venv"/.installed-*
touch "$stamp"
