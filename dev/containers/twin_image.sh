#!/usr/bin/env bash
# twin_image.sh NAME: the CPU twin of an NVIDIA image as an image of its own, run by the dev cluster's
# jobs as the image itself would be. NAME is the image's name in containers.lock (nemo-rl, nemo); the image is
# pushed as $registry_addr/jobs/twin-NAME, pinned by digest as `twin-NAME` in the dev lock, imported
# to a squashfs for Charliecloud.
#   rootfs   rootfs.sh's Debian bookworm (python3 3.11)
#   python   the twin's venv (dev/twin_venv.sh) moved to where the image keeps its Python, NVIDIA's
#            source to where the image keeps its checkout; the venv's interpreter links, script
#            shebangs and path files rewritten to those places, its base interpreter the image's
#            /usr/bin/python3.11 (the venv was built by the same minor, 3.11)
#   env      the image's ENV, from NVIDIA's own Dockerfile (dockerfile_env.py): PATH starts with the
#            venv's bin, as in the image; in the image's config (oci_layout.py)
#   push     skopeo copy oci: -> https://$registry_addr/jobs/twin-NAME:COMMIT, digest from the registry
#   pin      `jobs containers pin twin-NAME` into the dev lock; import: `jobs containers import`
# Builds once per set-up: a stamp keyed on these scripts, the base and the twin venv's own stamp (which
# keys on its lock and sources); a second run checks that the registry serves the pinned digest.
# Needs: dev/setup.sh (.venv), the twin venv, dev/containers/registry.sh, rootfs.sh. Root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/env.sh"
name=${1:?usage: twin_image.sh nemo-rl|nemo}
# Per twin: its venv, where the image keeps its Python, the upstream checkouts (a folder of the venv, then
# where the image has it), the Dockerfile the image's environment is read from, what must import there,
# and the image's worker venvs (twins of their own, dev/twin_venv.sh).
case $name in
  nemo-rl)   # NeMo RL's docker/Dockerfile: /opt/nemo_rl_venv, the checkout at /opt/nemo-rl
    venv=$root/.venv-nemo-rl
    python_at=/opt/nemo_rl_venv
    sources=("nemo-rl:/opt/nemo-rl")
    dockerfile=$venv/nemo-rl/docker/Dockerfile
    commit=823fcc904
    build_args=(NEMO_RL_COMMIT=$commit)
    imports="ray, nemo_rl"
    # The worker venvs, where NeMo RL keeps them ($NEMO_RL_VENV_DIR/<the actor's class>), each with the
    # command prefetch_venvs.py makes for it and the module it holds that the default venv lacks:
    # VENV:WHERE:COMMAND:MODULE. The vLLM generation worker's; the Megatron policy worker's (the rl
    # stage's Megatron -> HF converter runs in it).
    workers=("$root/.venv-nemo-rl-vllm:/opt/ray_venvs/nemo_rl.models.generation.vllm.vllm_worker.VllmGenerationWorker:python-VllmGenerationWorker:vllm"
             "$root/.venv-nemo-rl-mcore:/opt/ray_venvs/nemo_rl.models.policy.workers.megatron_policy_worker.MegatronPolicyWorker:python-MegatronPolicyWorker:megatron.bridge")
    ;;
  nemo)      # Megatron-Bridge's docker/Dockerfile.ci: /opt/venv, Bridge at /opt/Megatron-Bridge, its Megatron-LM in 3rdparty/
    venv=$root/.venv-nemo
    python_at=/opt/venv
    sources=("Megatron-Bridge:/opt/Megatron-Bridge" "Megatron-LM:/opt/Megatron-Bridge/3rdparty/Megatron-LM")
    dockerfile=$venv/Megatron-Bridge/docker/Dockerfile.ci
    commit=1cedb0a9c
    build_args=()
    imports="ray, megatron.core, transformers; assert u.find_spec('megatron.bridge')"
    workers=()
    ;;
  *) echo "twin_image.sh: no twin named $name" >&2; exit 2 ;;
esac
repo=jobs/twin-$name
ref=$registry_addr/$repo:$commit
jobs=("$root/.venv/bin/python" -m jobs.cli)
export PYTHONPATH=$root JOBS_CONTAINERS_LOCK=$dev_lock
built() {  # built VENV: its real path, once dev/twin_venv.sh has built it
  local v
  v=$(cd "$1" 2>/dev/null && pwd -P) && [ -n "$(cd "$v" && ls .installed-* 2>/dev/null)" ] && echo "$v" ||
    { echo "twin_image.sh: $1 is not built (dev/twin_venv.sh)" >&2; return 1; }
}
venv=$(built "$venv")
twin_stamps=$(cd "$venv" && ls .installed-*)
for w in "${workers[@]}"; do
  wv=$(built "${w%%:*}")
  twin_stamps+=" $(cd "$wv" && ls .installed-*)"
done
key=$( { cat "$here/twin_image.sh" "$here/rootfs.sh" "$here/env.sh" "$here/oci_layout.py" "$here/dockerfile_env.py"
         echo "$twin_stamps"; } | sha256sum | cut -c1-16)
stamp=$image_dir/twin-$name-$key
if [ -f "$stamp" ]; then
  digest=$(cat "$stamp")
  served=$(skopeo inspect --format '{{.Digest}}' "docker://$registry_addr/$repo@$digest" 2>/dev/null || true)
  if [ "$served" = "$digest" ] && "${jobs[@]}" containers list | grep -q "@$digest"; then
    "${jobs[@]}" containers import "twin-$name" --runtime charliecloud --dir "$sqsh_dir"
    exit 0
  fi
fi

t0=$SECONDS
build=$image_dir/twin-$name-build
rm -rf "$build"
mkdir -p "$build/rootfs" "$sqsh_dir"
"$here/rootfs.sh"
tar -C "$build/rootfs" -xf "$image_dir"/base-*.tar
rootfs=$build/rootfs
# place VENV AT: the venv (without the checkouts, which go where the image keeps them) at AT in the image;
# its base interpreter the image's own, its scripts and path files pointing at the image's places.
place() {
  local from=$1 at=$2 pair excludes=(--exclude='./.installed-*') rewrite=()
  for pair in "${sources[@]}"; do
    excludes+=(--exclude="./${pair%%:*}")
    rewrite+=(-e "s|$from/${pair%%:*}|${pair#*:}|g")
  done
  mkdir -p "$rootfs$at"
  tar -C "$from" "${excludes[@]}" -cf - . | tar -C "$rootfs$at" -xf -
  printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\nexecutable = /usr/bin/python3.11\n' \
    "$version" >"$rootfs$at/pyvenv.cfg"
  ln -sfn /usr/bin/python3.11 "$rootfs$at/bin/python3.11"
  grep -lI "^#!$from/bin/python" "$rootfs$at"/bin/* | xargs -r sed -i "1s|^#!$from/bin/python|#!$at/bin/python|"
  sed -i "${rewrite[@]}" -e "s|$from|$at|g" "$rootfs$at"/lib/python3.11/site-packages/*.pth
}
for pair in "${sources[@]}"; do
  mkdir -p "$rootfs${pair#*:}"
  tar -C "$venv/${pair%%:*}" -cf - . | tar -C "$rootfs${pair#*:}" -xf -
done
version=$(chroot "$rootfs" /usr/bin/python3.11 -c 'import platform; print(platform.python_version())')
place "$venv" "$python_at"
for w in "${workers[@]}"; do
  IFS=: read -r from at command module <<<"$w"
  from=$(cd "$from" && pwd -P)
  place "$from" "$at"
  # Its checkout over the image's: the same commit, plus the submodules its extra installs editable
  # (NeMo RL's image has 3rdparty/Megatron-LM-workspace/Megatron-LM and Megatron-Bridge checked out).
  for pair in "${sources[@]}"; do
    tar -C "$from/${pair%%:*}" -cf - . | tar -C "$rootfs${pair#*:}" -xf -
  done
  # The worker's command, as NeMo RL's prefetch_venvs.py makes it in the image: that venv's Python, active.
  printf '#!/bin/sh\nexport VIRTUAL_ENV=%s PATH=%s/bin:"$PATH"\nexec %s/bin/python "$@"\n' "$at" "$at" "$at" \
    >"$rootfs/usr/local/bin/$command"
  chmod 755 "$rootfs/usr/local/bin/$command"
  chroot "$rootfs" env -i PATH=/usr/bin:/bin "/usr/local/bin/$command" -c "import sys, importlib.util as u
assert sys.prefix == '$at' and u.find_spec('$module') and u.find_spec('nemo_rl'), sys.prefix
print('twin: $command is', sys.prefix)"
done
"$root/.venv/bin/python" "$here/dockerfile_env.py" "$dockerfile" "${build_args[@]}" >"$build/env"
# The image's Python, as a job there gets it (the config's PATH, nothing of the host's): NVIDIA's
# library and the image's Ray, and nothing of this project's launcher (cloudpickle is in the lock: mlflow, ray).
chroot "$rootfs" env -i $(grep '^PATH=' "$build/env") HOME=/root python3 -c "import sys, importlib.util as u, $imports
assert sys.prefix == '$python_at', sys.prefix
extra = [m for m in ('submitit', 'jobs', 'runtime') if u.find_spec(m)]
assert not extra, extra
print('twin: python3 is', sys.executable, sys.version.split()[0], 'ray', ray.__version__)"
find "$rootfs" -name __pycache__ -prune -exec rm -rf {} +
echo "twin: rootfs after $((SECONDS - t0)) s, $(du -sm "$rootfs" | cut -f1) MB"

tar -C "$rootfs" --numeric-owner --sort=name --exclude='./dev/*' -cf "$build/rootfs.tar" .
rm -rf "$rootfs"
"$root/.venv/bin/python" "$here/oci_layout.py" "$build/oci" "$build/rootfs.tar" "$commit" "$build/env"
skopeo copy -q --preserve-digests "oci:$build/oci:$commit" "docker://$ref"
digest=$(skopeo inspect --format '{{.Digest}}' "docker://$ref")
echo "twin: pushed $ref@$digest, $(du -m "$build/rootfs.tar" | cut -f1) MB uncompressed, after $((SECONDS - t0)) s"
rm -rf "$build"

"${jobs[@]}" containers pin "twin-$name" --digest "$digest" --image "$ref"
"${jobs[@]}" containers import "twin-$name" --runtime charliecloud --dir "$sqsh_dir"
echo "twin: $name built, pushed, pinned and imported in $((SECONDS - t0)) s"
echo "$digest" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
