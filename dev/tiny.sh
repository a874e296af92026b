#!/usr/bin/env bash
# The main job: set up, then run the whole tiny pipeline on this machine (store: $JOBS_HOME or ~/.jobs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/dev/setup.sh"
echo "to type \`jobs …\` yourself in bash or zsh: source .venv/bin/activate (README: Using it)" >&2
exec "$root/.venv/bin/jobs" submit tiny --stage all "$@"
