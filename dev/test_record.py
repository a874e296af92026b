"""Appends one JSON line about a `dev/test.sh` run to $JOBS_TEST_TIMES (default
bench/results/test-runs.jsonl): when and on what it ran (commit, host CPU, the CPU kernels torch ran,
load before and after), each set-up step's seconds, the tests' and the whole run's seconds,
pytest's own summary line, and the CPU twins' share: their set-up steps and the seconds pytest's own
JUnit report gives their tests (tests/twins/, the twin images on Slurm) against all tests' seconds
(summed over the workers, so a share of the work, not of the wall clock). dev/test.sh calls it when the
tests end; nothing in it is typed by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.cpu import cpu_kernels  # noqa: E402

#: The CPU twins' tests (JUnit classnames) and set-up steps (dev/test.sh's names).
TWIN_TESTS = ("tests.twins.", "tests.slurm.test_twins_on_slurm")
TWIN_STEPS = ("twin", "twin_vllm", "twin_mcore", "twin_nemo", "twin_nemotron", "twin_images")
SUMMARY = re.compile(r"^=+ (.*\b(?:passed|failed|error|errors|skipped|no tests ran)\b.*) =+$")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def twins_share(junit: Path, steps: dict) -> dict:
    """The twins' set-up steps' seconds, and their tests' seconds against all tests' (pytest's JUnit times)."""
    import xml.etree.ElementTree as ET

    total = twins = 0.0
    for case in ET.parse(junit).iter("testcase"):
        seconds = float(case.get("time") or 0)
        total += seconds
        twins += seconds if (case.get("classname") or "").startswith(TWIN_TESTS) else 0
    return {"setup_steps_s": {n: steps[n]["s"] for n in TWIN_STEPS if n in steps}, "tests_s": round(twins, 1),
            "all_tests_s": round(total, 1), "tests_share": round(twins / total, 3) if total else None}


def record(args: argparse.Namespace) -> dict:
    steps = {}
    for line in Path(args.steps).read_text().splitlines():
        name, seconds, rc = line.split()
        steps[name] = {"s": int(seconds), "exit": int(rc)}
    summary = [m.group(1) for line in Path(args.pytest_output).read_text(errors="replace").splitlines()
               if (m := SUMMARY.match(line.strip()))]
    kept = {
        "started": args.started,
        "ended": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "host": {"cpu": cpu_model(), "cpus": os.cpu_count(), "cpu_kernels": cpu_kernels()},
        "load_before": args.load_before,
        "load_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "workers": os.environ.get("JOBS_TEST_WORKERS", "2"),
        "args": args.pytest_args,
        "setup_steps": steps,
        "setup_s": args.setup_s,
        "tests_s": args.total_s - args.setup_s,
        "total_s": args.total_s,
        "exit": args.exit,
        "pytest": summary[-1] if summary else None,
    }
    if args.junit and Path(args.junit).is_file():
        kept["twins"] = twins_share(Path(args.junit), steps)
    return kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", required=True)
    p.add_argument("--pytest-output", required=True)
    p.add_argument("--exit", type=int, required=True)
    p.add_argument("--started", required=True)
    p.add_argument("--load-before", required=True)
    p.add_argument("--setup-s", type=int, required=True)
    p.add_argument("--total-s", type=int, required=True)
    p.add_argument("--junit", help="pytest's --junitxml report of the run")
    p.add_argument("pytest_args", nargs="*")
    args = p.parse_args()
    line = json.dumps(record(args), sort_keys=True)
    target = Path(os.environ.get("JOBS_TEST_TIMES") or ROOT / "bench" / "results" / "test-runs.jsonl")
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as f:
        f.write(line + "\n")
    kept = json.loads(line)
    print(f"dev/test.sh: {kept['pytest']}; set-up {args.setup_s} s, tests {args.total_s - args.setup_s} s, "
          f"{args.total_s} s in all; kept in {target}", file=sys.stderr)
    if "twins" in kept:
        t = kept["twins"]
        steps = ", ".join(f"{n} {s} s" for n, s in t["setup_steps_s"].items())
        print(f"dev/test.sh: the CPU twins: set-up {steps}; their tests {t['tests_s']:.0f} s of all tests' "
              f"{t['all_tests_s']:.0f} s ({100 * (t['tests_share'] or 0):.0f}%, summed over the workers)", file=sys.stderr)


if __name__ == "__main__":
    main()
