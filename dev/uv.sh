# Sourced by dev/setup.sh and dev/bridge_venv.sh. uv installs: one resolve, wheels fetched and unpacked
# in parallel (pip: one at a time), no byte code (the first import compiles what is used and Python
# caches it). dev/test.sh prints each set-up step's time.
#
# uv_setup VENV [CONSTRAINT...]: puts uv into VENV and sets the array `uv` to its install command,
# held to the CONSTRAINTs and to torch==2.13.0, taken from where this machine's pip finds it (a CPU
# build on local disk): anything else would fetch CUDA wheels.
uv_setup() {
  local venv=$1
  shift
  "$venv/bin/pip" install -q uv==0.13.9
  uv_wheels=$(mktemp -d)
  trap 'rm -rf "$uv_wheels"' EXIT
  "$venv/bin/pip" download -q --no-deps torch==2.13.0 -d "$uv_wheels"
  printf '%s\n' torch==2.13.0 "$@" >"$uv_wheels/pin.txt"
  uv=("$venv/bin/uv" pip install -q --python "$venv/bin/python" --find-links "$uv_wheels" -c "$uv_wheels/pin.txt")
}
