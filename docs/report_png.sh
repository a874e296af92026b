#!/usr/bin/env bash
# Renders docs/report.png: `jobs report tiny/rl/model:latest` (the RL model: its whole ancestry, and
# the eval and export runs that used it) on a store where the tiny pipeline ran, screenshotted by
# headless Chromium from a file:// path (Debian: apt-get install -y chromium graphviz).
# Usage: docs/report_png.sh STORE [TARGET [HEIGHT_PX]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
store=${1:?usage: docs/report_png.sh STORE [TARGET [HEIGHT_PX]]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/.venv/bin/jobs" --store "$store" report "${2:-tiny/rl/model:latest}" --out "$tmp/report.html"
chromium --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size="1280,${3:-3000}" --screenshot="$root/docs/report.png" "file://$tmp/report.html" 2>/dev/null
echo "$root/docs/report.png"
