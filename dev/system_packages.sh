#!/usr/bin/env bash
# Debian packages the tests use beyond Python. Idempotent: installs only what is missing.
#   chromium, graphviz, fonts: the report's browser test and `dot` for its lineage graph.
#   charliecloud (ch-run, ch-image, ch-convert), squashfuse, squashfs-tools: the container runtime
#     the dev cluster's jobs start in, unprivileged, from a squashfs named by digest.
#   docker-registry, skopeo, mmdebstrap, openssl: the local TLS registry and the image built from
#     Debian's packages and PyPI (dev/containers/).
set -euo pipefail
packages=(chromium graphviz fonts-dejavu-core
          charliecloud charliecloud-builders squashfuse squashfs-tools
          docker-registry skopeo mmdebstrap openssl ca-certificates curl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "system packages: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
