#!/usr/bin/env bash
# The whole test suite: set up, start the dev Slurm cluster, run every test (slow ones included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Byte code: the venvs are installed without it (dev/setup.sh's --no-compile) and the dev image holds
# none, so a module is compiled on its first import and cached, unless the caller's environment sets
# PYTHONDONTWRITEBYTECODE: then every stage process, Ray worker and Slurm job of the suite compiles
# torch, transformers and wandb from source again (a quarter of a training test's CPU time, README.md).
# The cache is one folder outside every source tree (the stores' code snapshots stay as stored), in
# /tmp, which the dev cluster's jobs share, inside the image too (ch-run binds the host's /tmp).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/jobs-pycache}
# The set-up steps write different things (.venv, .venv-bridge, dpkg) and mostly wait on unpacking and
# disk, one core each: run them side by side. The two apt steps stay in one line (one dpkg at a time).
# Each step's output is kept and printed when it ends, so nothing interleaves.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
step() {  # step NAME COMMAND...: run, then print its output; its exit status
  local name=$1 rc=0 t0=$SECONDS
  shift
  "$@" >"$logs/$name" 2>&1 || rc=$?
  { echo "== $name: exit $rc after $((SECONDS - t0)) s"; cat "$logs/$name"; } >&2
  return "$rc"
}
step setup "$root/dev/setup.sh" & venv=$!
step bridge "$root/dev/bridge_venv.sh" & bridge=$!   # megatron-core + Megatron-Bridge on CPU (tests/stages/test_bridge_real.py)
step twin "$root/dev/twin_venv.sh" & twin=$!   # the nemo-rl image's Python, CPU twin (tests/twins/)
# Debian packages: chromium + graphviz for the report tests; Charliecloud, the registry, skopeo and
# mmdebstrap for the container tests (none is skipped). Then side by side: the real Slurm cluster the
# Slurm tests run against; the local TLS registry and the image's Debian base (dev/containers/).
failed=0
step system_packages "$root/dev/system_packages.sh" || failed=1
slurm= base=
if [ "$failed" = 0 ]; then
  step slurm "$root/dev/slurm/up.sh" & slurm=$!
  { step registry "$root/dev/containers/registry.sh" && step rootfs "$root/dev/containers/rootfs.sh"; } & base=$!
fi
for p in "$venv" $base; do wait "$p" || failed=1; done
# The image (the stages' libraries at .venv's versions) pushed, pinned in the machine's lock and
# imported for Charliecloud, once per set-up; it needs .venv, the registry and the base.
image=
[ "$failed" = 0 ] && { step image "$root/dev/containers/image.sh" & image=$!; }
for p in "$bridge" "$twin" $slurm $image; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "dev/test.sh: set-up failed (see above)" >&2; exit 1; }
rm -rf "$logs"
trap - EXIT
cd "$root"
# Two workers (pytest-xdist): most tests wait on a single-threaded `jobs` process or on Slurm, so the
# second core would idle; tests/conftest.py keeps on one worker what must share one (the pipeline
# fixture, the Slurm cluster, each module's fixtures). JOBS_TEST_WORKERS=0 runs them in this process.
# OMP_WAIT_POLICY=PASSIVE: with two tests training side by side, torch's OpenMP threads that spin at
# each barrier take the core the other needs (bench/README.md: 3.5-6x slower); passive threads sleep.
# It changes waiting only, not the arithmetic.
[ "${JOBS_TEST_WORKERS:-2}" = 0 ] || export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# --durations: every run names its slowest tests (where the suite's time goes).
exec "$root/.venv/bin/python" -m pytest -n "${JOBS_TEST_WORKERS:-2}" --no-loadscope-reorder \
    -ra --durations=30 "$@"
