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
# Each run's times (set-up steps, tests, total) and what it ran on are kept: dev/test_record.py appends
# one JSON line to $JOBS_TEST_TIMES (default bench/results/test-runs.jsonl) when the tests end.
steps=$(mktemp)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%FT%TZ)
trap 'rm -rf "$logs" "$steps"' EXIT
step() {  # step NAME COMMAND...: run, then print its output; its exit status
  local name=$1 rc=0 t0=$SECONDS
  shift
  "$@" >"$logs/$name" 2>&1 || rc=$?
  { echo "== $name: exit $rc after $((SECONDS - t0)) s"; cat "$logs/$name"; } >&2
  echo "$name $((SECONDS - t0)) $rc" >>"$steps"
  return "$rc"
}
step setup "$root/dev/setup.sh" & venv=$!
step bridge "$root/dev/bridge_venv.sh" & bridge=$!   # megatron-core + Megatron-Bridge on CPU (tests/stages/test_bridge_real.py)
step twin "$root/dev/twin_venv.sh" & twin=$!   # the nemo-rl image's Python, CPU twin (tests/twins/)
step twin_nemo "$root/dev/twin_venv.sh" nemo & twin_nemo=$!   # the nemo image's Python, CPU twin (tests/twins/)
step twin_vllm "$root/dev/twin_venv.sh" nemo-rl-vllm & twin_vllm=$!   # the nemo-rl image's vLLM worker Python, CPU twin
step twin_nemotron "$root/dev/twin_venv.sh" nemotron & twin_nemotron=$!   # Nemotron's nano3 data prep's Python (cosmos-xenna on Ray)
step twin_mcore "$root/dev/twin_venv.sh" nemo-rl-mcore & twin_mcore=$!   # the nemo-rl image's Megatron worker Python, CPU twin
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
# The CPU twins of NVIDIA's images as images (pushed, pinned in the machine's lock as twin-NAME, imported),
# once per set-up; each needs its twin venv, the registry and the base.
wait "$twin" || failed=1
wait "$twin_nemo" || failed=1
wait "$twin_vllm" || failed=1
wait "$twin_nemotron" || failed=1
wait "$twin_mcore" || failed=1
twin_images=
[ "$failed" = 0 ] && { step twin_images sh -c '"$1" nemo-rl && "$1" nemo' sh "$root/dev/containers/twin_image.sh" & twin_images=$!; }
for p in "$bridge" $slurm $image $twin_images; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "dev/test.sh: set-up failed (see above)" >&2; exit 1; }
rm -rf "$logs"
trap 'rm -f "$steps"' EXIT
setup_s=$SECONDS
cd "$root"
# Two workers (pytest-xdist): most tests wait on a single-threaded `jobs` process or on Slurm, so the
# second core would idle; tests/conftest.py keeps on one worker what must share one (the pipeline
# fixture, the Slurm cluster, each module's fixtures). JOBS_TEST_WORKERS=0 runs them in this process.
# OMP_WAIT_POLICY=PASSIVE: with two tests training side by side, torch's OpenMP threads that spin at
# each barrier take the core the other needs and slow both down several times; passive threads sleep.
# It changes waiting only, not the arithmetic.
[ "${JOBS_TEST_WORKERS:-2}" = 0 ] || export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# JOBS_NO_SKIP: the set-up above provides every library, venv, package and privilege a test needs, so
# a skipped (or expected-to-fail) test fails the run instead of leaving it green (tests/conftest.py).
export JOBS_NO_SKIP=${JOBS_NO_SKIP:-1}
# --durations: every run names its slowest tests (where the suite's time goes).
out=$(mktemp)
trap 'rm -f "$steps" "$out" "$out.xml"' EXIT
rc=0
# --junitxml: each test's seconds, from which dev/test_record.py keeps the CPU twins' share.
"$root/.venv/bin/python" -m pytest -n "${JOBS_TEST_WORKERS:-2}" --no-loadscope-reorder \
    -ra --durations=30 --junitxml="$out.xml" "$@" 2>&1 | tee "$out" || rc=${PIPESTATUS[0]}
"$root/.venv/bin/python" "$root/dev/test_record.py" --steps "$steps" --pytest-output "$out" --junit "$out.xml" --exit "$rc" \
    --started "$started" --load-before "$load_before" --setup-s "$setup_s" --total-s "$SECONDS" -- "$@" \
    || echo "dev/test.sh: the run's times were not kept (see above)" >&2
exit "$rc"
