#!/usr/bin/env bash
# The image's Debian base: bookworm with python3 (+ pip, venv) by mmdebstrap from Debian's mirror, as a
# tar that image.sh unpacks and fills. Needs no .venv, so dev/test.sh runs it beside dev/setup.sh.
# Kept between builds, keyed on this script. Root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
base=$image_dir/base-$(cat "$here/rootfs.sh" "$here/env.sh" | sha256sum | cut -c1-16).tar
[ -s "$base" ] && exit 0
mkdir -p "$image_dir"
t0=$SECONDS
# Docs, man pages and translations are left out: nothing in a job reads them.
mmdebstrap --quiet --variant=apt --include=python3,python3-pip,python3-venv,python-is-python3 \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  bookworm "$base.partial.tar" http://deb.debian.org/debian
find "$image_dir" -maxdepth 1 -name 'base-*.tar' ! -name "$(basename "$base.partial.tar")" -delete
mv "$base.partial.tar" "$base"
echo "rootfs: $base in $((SECONDS - t0)) s"
