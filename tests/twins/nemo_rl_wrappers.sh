#!/bin/sh
# Run in the twin: NeMo RL's own prefetch_venvs.py (what the nemo-rl image's Dockerfile runs at build), in a
# mount namespace whose /usr/local/bin is OUT/bin, with a `uv` that only logs how it was called (no
# network, no CUDA wheels). What it leaves: OUT/bin/python-* (the wrappers the image holds), OUT/uv.log.
#   nemo_rl_wrappers.sh PYTHON OUT
set -eu
py=$1 out=$2
mkdir -p "$out/bin" "$out/fake" "$out/ray_venvs"
cat >"$out/fake/uv" <<EOS
#!/bin/sh
echo "\${UV_PROJECT_ENVIRONMENT:-} \$*" >>"$out/uv.log"
EOS
chmod +x "$out/fake/uv"
exec unshare --user --map-root-user --mount sh -c \
  'mount --bind "$1/bin" /usr/local/bin && cd "$3" && PATH="$1/fake:$PATH" NRL_CONTAINER=1 NEMO_RL_VENV_DIR="$1/ray_venvs" exec "$2" -m nemo_rl.utils.prefetch_venvs' \
  sh "$out" "$py" "$(dirname "$(dirname "$py")")/nemo-rl"
