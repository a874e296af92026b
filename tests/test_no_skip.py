"""Where the set-up has run (dev/test.sh sets JOBS_NO_SKIP; CI sets CI), a skipped or expected-to-fail
test fails the run (tests/conftest.py): a test that did not run cannot leave the suite green."""
import os
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).parent / "fixtures" / "skips" / "probe_skips.py"


def pytest_on_probe(**env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "JOBS_NO_SKIP", "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                           str(PROBE)], capture_output=True, text=True, cwd=Path(__file__).parents[1],
                          env={**clean, **env}, timeout=120)


def test_a_skip_fails_where_the_set_up_ran_and_is_reported_elsewhere():
    loose = pytest_on_probe()
    assert loose.returncode == 0 and "1 passed, 1 skipped, 1 xfailed" in loose.stdout, loose.stdout
    for var in ("JOBS_NO_SKIP", "CI"):
        strict = pytest_on_probe(**{var: "1"})
        assert strict.returncode == 1 and "2 failed, 1 passed" in strict.stdout, strict.stdout
        assert f"skipped: Skipped: a library is missing, where no test may be ({var} set)" in strict.stdout
        assert f"expected to fail (not built yet), where no test may be ({var} set)" in strict.stdout
    assert pytest_on_probe(JOBS_NO_SKIP="0").returncode == 0
