#!/usr/bin/env bash
# Builds the dev cluster's image, pushes it to the local registry, pins its digest in the dev lock and
# imports it to a squashfs for Charliecloud. Like NVIDIA's images, it holds Debian's Python with the ML
# libraries installed system-wide (/usr/local) and nothing of our launcher: a job brings that.
#   rootfs   rootfs.sh: Debian bookworm, python3 (+ pip, venv), mmdebstrap from Debian's mirror
#   python   pip inside the rootfs (chroot), offline from wheels the project's .venv resolves: the
#            libraries the stages import at the .venv's exact versions (requirements.py), CPU torch
#   push     skopeo copy tarball: -> https://$registry_addr/jobs/tiny-cpu:0.1, digest from the registry
#   pin      `jobs containers pin` into the dev lock ($dev_lock), never the committed containers.lock
#   import   `jobs containers import --runtime charliecloud` -> $sqsh_dir/<name by digest>.sqsh
# Builds once per set-up: a stamp keyed on these scripts and the package list; a second run checks
# that the registry still serves the pinned digest and the squashfs exists, and does nothing else.
# Needs: dev/setup.sh (.venv), dev/system_packages.sh, dev/containers/registry.sh. Root.
# Times: containers/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/env.sh"
venv=$root/.venv
repo=jobs/tiny-cpu
tag=0.1
ref=$registry_addr/$repo:$tag
jobs=("$venv/bin/python" -m jobs.cli)
export PYTHONPATH=$root JOBS_CONTAINERS_LOCK=$dev_lock
mkdir -p "$image_dir" "$sqsh_dir"

requirements=$("$venv/bin/python" "$here/requirements.py")
key=$( { cat "$here/image.sh" "$here/rootfs.sh" "$here/env.sh" "$here/requirements.py"; echo "$requirements"; } | sha256sum | cut -c1-16)
stamp=$image_dir/built-$key
if [ -f "$stamp" ]; then
  digest=$(cat "$stamp")
  served=$(skopeo inspect --format '{{.Digest}}' "docker://$registry_addr/$repo@$digest" 2>/dev/null || true)
  if [ "$served" = "$digest" ] && "${jobs[@]}" containers list | grep -q "@$digest"; then
    "${jobs[@]}" containers import tiny-cpu --runtime charliecloud --dir "$sqsh_dir"
    "$here/ready.sh" "$digest"
    exit 0
  fi
fi

t0=$SECONDS
build=$image_dir/build
rm -rf "$build"
mkdir -p "$build"
"$here/rootfs.sh"        # dev/test.sh ran it already, beside dev/setup.sh
mkdir -p "$build/rootfs"
tar -C "$build/rootfs" -xf "$image_dir"/base-*.tar
echo "image: rootfs after $((SECONDS - t0)) s"

# The wheels: resolved on the host by the .venv's pip (its indexes and local files), kept between builds.
echo "$requirements" >"$build/requirements.txt"
"$venv/bin/pip" wheel -q --no-deps -r "$build/requirements.txt" -w "$image_dir/wheels" >"$build/pip.log" 2>&1 ||
  { grep -v "is ignored: it is" "$build/pip.log" >&2; exit 1; }
echo "image: wheels after $((SECONDS - t0)) s"

# Install inside the rootfs with its own pip, offline, the wheels bound in a private mount namespace
# (gone when the command ends, whatever happens). --break-system-packages: the ML stack goes to
# /usr/local as NVIDIA's images have it, on the system python3.
mkdir -p "$build/rootfs/mnt/wheels"
cp "$build/requirements.txt" "$build/rootfs/tmp/requirements.txt"
unshare --mount --propagation private -- sh -euc '
  mount --bind "$1/wheels" "$2/mnt/wheels"
  chroot "$2" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --no-index --find-links /mnt/wheels --no-deps --no-compile \
    --no-cache-dir --break-system-packages --root-user-action=ignore -r /tmp/requirements.txt
  chroot "$2" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root python3 -c "import torch, transformers, tokenizers, safetensors, numpy, ray, wandb, tensorboard, datasets
import importlib.util as u
extra = [m for m in (\"submitit\", \"hydra\", \"omegaconf\", \"cloudpickle\", \"jobs\") if u.find_spec(m)]
assert not extra, extra
print(\"image: python\", __import__(\"sys\").version.split()[0], \"torch\", torch.__version__, \"transformers\", transformers.__version__)"
' sh "$image_dir" "$build/rootfs"
rm -rf "$build/rootfs/mnt/wheels" "$build/rootfs/tmp/requirements.txt"
find "$build/rootfs" -name __pycache__ -prune -exec rm -rf {} +
echo "image: python packages after $((SECONDS - t0)) s"

# One layer. Device nodes stay out (a container runtime makes /dev).
tar -C "$build/rootfs" --numeric-owner --sort=name --exclude='./dev/*' -cf "$build/rootfs.tar" .
skopeo copy -q --dest-compress-level 1 --digestfile "$build/digest" "tarball:$build/rootfs.tar" "docker://$ref"
digest=$(cat "$build/digest")
served=$(skopeo inspect --format '{{.Digest}}' "docker://$ref")
[ "$served" = "$digest" ] || { echo "image.sh: pushed $digest but $ref serves $served" >&2; exit 1; }
echo "image: pushed $ref@$digest, $(du -m "$build/rootfs.tar" | cut -f1) MB uncompressed, after $((SECONDS - t0)) s"
rm -rf "$build"

"${jobs[@]}" containers pin tiny-cpu --digest "$digest" --image "$ref"
"${jobs[@]}" containers import tiny-cpu --runtime charliecloud --dir "$sqsh_dir"
echo "image: built, pushed, pinned and imported in $((SECONDS - t0)) s"
"$here/ready.sh" "$digest"
echo "$digest" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
