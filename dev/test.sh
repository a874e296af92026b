#!/usr/bin/env bash
# The whole test suite: set up, start the dev Slurm cluster, run every test (slow ones included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/dev/setup.sh"
"$root/dev/bridge_venv.sh"   # megatron-core + Megatron-Bridge on CPU (tests/stages/test_bridge_real.py)
"$root/dev/system_packages.sh"   # chromium + graphviz for the report tests
"$root/dev/slurm/up.sh"   # the Slurm tests run against this real cluster; none is skipped
cd "$root"
exec "$root/.venv/bin/python" -m pytest -ra "$@"
