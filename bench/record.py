"""Run a bench script and keep its whole output as a raw result file under bench/results/.

    .venv/bin/python bench/record.py tiny-avx512 -- .venv/bin/python bench/tiny.py
    .venv/bin/python bench/record.py NAME --note "the test suite ran beside it" -- COMMAND...

The file, bench/results/NAME-YYYY-MM-DD.md, starts with a header of `# ` lines: the command, the
commit (and whether the tree had uncommitted changes), the UTC start, the host's CPU model and cores,
torch's CPU kernels (`torch.backends.cpu.get_cpu_capability()`, which `ATEN_CPU_CAPABILITY` can
lower), the environment that changes the timings, and /proc/loadavg. Then the command's stdout as it
printed it, then its exit status, wall time and the load after. Nothing in it is written by hand but
the optional --note; bench/publish.py renders the docs' numbers from these files.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_KEYS = ("OMP_WAIT_POLICY", "ATEN_CPU_CAPABILITY", "TMPDIR", "PYTHONPYCACHEPREFIX")


def git(*args: str) -> str:
    r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return r.stdout.strip()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def cpu_capability() -> str:
    """Asked of the same Python the benches run under, in a process of its own (torch is heavy)."""
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="the raw file's name before its date, e.g. tiny-avx512")
    ap.add_argument("--note", help="one line on what else ran on the host")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, command = ap.parse_args(argv[:cut]), argv[cut + 1:]
    if not command:
        sys.exit("bench/record.py: no command given (NAME -- COMMAND...)")

    dirty = " (uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    started = time.time()
    path = args.out / f"{args.name}-{time.strftime('%Y-%m-%d', time.gmtime(started))}.md"
    head = [
        f"# `{' '.join(command)}`",
        "#",
        f"# commit {git('rev-parse', '--short', 'HEAD')}{dirty}; "
        f"started {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(started))} UTC",
        f"# host CPU: {cpu_model()}, {os.cpu_count()} cores; torch CPU capability: {cpu_capability()}",
        "# environment: " + (", ".join(f"{k}={os.environ[k]}" for k in ENV_KEYS if k in os.environ) or "-"),
    ]
    if args.note:
        head.append(f"# note: {args.note}")
    head.append(f"# load average before (/proc/loadavg): {loadavg()}")
    r = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)   # stderr stays on the terminal
    tail = [
        f"# finished {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC "
        f"({time.time() - started:.0f} s wall), exit {r.returncode}",
        f"# load average after (/proc/loadavg): {loadavg()}",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head) + "\n\n" + r.stdout.rstrip("\n") + "\n\n" + "\n".join(tail) + "\n")
    print(path)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
