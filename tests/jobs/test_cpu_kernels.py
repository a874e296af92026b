"""The CPU kernels torch runs are part of a run's environment: named as torch itself names them, kept
in the record and each attempt, part of the run cache's key, and compared by `jobs reproduce`."""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store
from runtime.cpu import ENV, cpu_flags, cpu_kernels

FIXTURES = Path(__file__).parents[1] / "fixtures"
X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="torch's x86 kernel builds only")
AVX512 = {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma"}
#: Two kernel builds this host runs: AVX2 beside AVX512 where the CPU has it, else beside DEFAULT.
HOST = cpu_kernels(environ={})
OTHER = {"avx512": "avx2", "avx2": "default", "default": "avx2"}[HOST]


@pytest.fixture
def env() -> dict:
    return {"JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


def test_the_answer_follows_the_cpu_flags_and_an_exact_pin():
    assert cpu_kernels({}, AVX512) == "avx512"
    assert cpu_kernels({}, AVX512 - {"avx512dq"}) == "avx2"      # AVX512 needs vl, bw, dq and fma
    assert cpu_kernels({}, {"avx2"}) == "default"                 # AVX2 needs fma too
    assert cpu_kernels({ENV: "avx2"}, AVX512) == "avx2"
    assert cpu_kernels({ENV: "default"}, AVX512) == "default"
    assert cpu_kernels({ENV: "AVX2"}, AVX512) == "avx512"         # torch reads the lowercase names only
    assert "fma" in cpu_flags() or HOST == "default"


@pytest.mark.parametrize("pin", [None, "avx2", "default", "AVX2", "sse"])
def test_the_answer_is_the_one_torch_gives(pin):
    """torch's own choice, in a fresh process (it reads the variable once, at its first operator)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if pin is not None:
        env[ENV] = pin
    got = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         capture_output=True, text=True, env=env, check=True).stdout.strip()
    assert got.lower() == cpu_kernels(env)


def test_reproduce_under_other_kernels_is_drift_named_in_one_line(tmp_path, env):
    store = tmp_path / "s"
    assert run_jobs(store, "submit", "testchain", "--stage", "count", env={**env, ENV: HOST}).code == 0
    (row,) = Store(store).index().runs()
    view = Store(store).run(row["id"])
    assert view.spec.environment["cpu_kernels"] == HOST and view.attempts[-1]["cpu_kernels"] == HOST
    assert f"({HOST})" in run_jobs(store, "show", view.id).out
    # The same submission under other kernels is another computation: the run cache does not answer it.
    other = run_jobs(store, "submit", "testchain", "--stage", "count", "--dry-run", env={**env, ENV: OTHER})
    assert other.code == 0 and "reused" not in other.out

    before = tree_digest(store)
    r = run_jobs(store, "reproduce", view.id, env={**env, ENV: OTHER})
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"ran {HOST} CPU kernels, here it would run {OTHER}" in r.err and f"{ENV}={HOST}" in r.err
    assert tree_digest(store) == before
    # With the recorded kernels pinned it is no drift at all; allowed, the new record names both sides.
    same = run_jobs(store, "reproduce", view.id, env={**env, ENV: HOST})
    assert same.code == 0 and "environment matches the record" in same.out, same.out + same.err
    ok = run_jobs(store, "reproduce", view.id, "--allow-env-drift", env={**env, ENV: OTHER})
    assert ok.code == 0 and "drift (allowed)" in ok.out, ok.out + ok.err
    newest = max(Store(store).index().runs(), key=lambda x: x["created"])
    drift = Store(store).run(newest["id"]).spec["env_drift"]
    assert drift == {"cpu_kernels": {"recorded": HOST, "ran": OTHER}}
    shown = run_jobs(store, "show", newest["id"]).out
    assert f"drift     cpu_kernels: recorded {HOST}, ran {OTHER}" in shown and f"({OTHER})" in shown
    assert json.loads(run_jobs(store, "show", newest["id"], "--json").out)["attempts"][-1]["cpu_kernels"] == OTHER


def test_a_profile_pins_the_kernels_of_its_jobs_and_the_record_says_so(tmp_path, env):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(f"pinned: {{partition: debug, containers: false, cpu_kernels: {OTHER}}}\n"
                        "typo: {partition: debug, containers: false, cpu_kernels: AVX2}\n")
    env = {**env, "JOBS_PROFILES": str(profiles)}
    store = tmp_path / "s"
    dry = run_jobs(store, "submit", "testchain", "--stage", "count", "--executor", "slurm", "--profile", "pinned",
                   "--dry-run", env=env)
    assert dry.code == 0, dry.err
    assert f"export {ENV}={OTHER}" in dry.out
    bad = run_jobs(store, "submit", "testchain", "--stage", "count", "--executor", "slurm", "--profile", "typo",
                   "--dry-run", env=env)
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1 and "cpu_kernels" in bad.err, bad.err
    assert not store.exists()
