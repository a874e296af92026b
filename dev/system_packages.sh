#!/usr/bin/env bash
# Debian packages the tests use beyond Python: Chromium (the report's browser test) and Graphviz
# (`dot` draws the report's lineage graph). Idempotent: installs only what is missing.
set -euo pipefail
packages=(chromium graphviz fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "system packages: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
