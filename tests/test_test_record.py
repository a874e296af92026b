"""dev/test.sh keeps each run's times: dev/test_record.py appends one JSON line made from the run's own
step times and pytest's own summary line."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_is_kept_as_one_line_from_its_steps_and_pytests_summary(tmp_path):
    (tmp_path / "steps").write_text("setup 37 0\nslurm 31 0\nimage 0 0\ntwin 12 0\ntwin_images 3 0\n")
    (tmp_path / "junit.xml").write_text(   # pytest's --junitxml layout: one testcase per test, its seconds
        '<testsuites><testsuite name="pytest" tests="3">'
        '<testcase classname="tests.twins.test_twin_versions" name="test_a" time="30.5"/>'
        '<testcase classname="tests.slurm.test_twins_on_slurm" name="test_b" time="250"/>'
        '<testcase classname="tests.slurm.test_containers_on_slurm" name="test_c" time="419.5"/>'
        '</testsuite></testsuites>')
    (tmp_path / "out").write_text("....\n===== slowest 30 durations =====\n12.0s call tests/x.py::t\n"
                                  "======= 716 passed, 1 failed in 1650.31s (0:27:30) =======\n")
    kept = tmp_path / "runs.jsonl"
    for _ in range(2):
        r = subprocess.run([sys.executable, str(ROOT / "dev" / "test_record.py"), "--steps", str(tmp_path / "steps"),
                            "--pytest-output", str(tmp_path / "out"), "--exit", "1", "--started", "2026-11-28T01:00:00Z",
                            "--load-before", "0.10 0.20 0.30", "--setup-s", "60", "--total-s", "1710",
                            "--junit", str(tmp_path / "junit.xml"), "--", "-k", "rl"],
                           capture_output=True, text=True, env={**os.environ, "JOBS_TEST_TIMES": str(kept)})
        assert r.returncode == 0, r.stderr
    lines = kept.read_text().splitlines()
    assert len(lines) == 2
    run = json.loads(lines[-1])
    assert run["pytest"] == "716 passed, 1 failed in 1650.31s (0:27:30)" and run["exit"] == 1
    assert run["setup_steps"]["slurm"] == {"s": 31, "exit": 0} and run["tests_s"] == 1650 and run["total_s"] == 1710
    assert run["args"] == ["-k", "rl"] and run["load_before"] == "0.10 0.20 0.30" and len(run["commit"]) == 40
    assert run["host"]["cpus"] == os.cpu_count() and "cpu_kernels" in run["host"]
    assert run["twins"] == {"setup_steps_s": {"twin": 12, "twin_images": 3}, "tests_s": 280.5, "all_tests_s": 700.0,
                            "tests_share": 0.401}
    assert "the CPU twins: set-up twin 12 s, twin_images 3 s; their tests 280 s of all tests' 700 s (40%" in r.stderr
