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
"$venv/bin/pip" install -q -e "$root[cpu,dev]"
rm -f "$venv"/.installed-*
touch "$stamp"
