"""An early USR2 (Slurm's time-limit warning or a preemption, sent before the job's Python has a
handler) is held by runtime.hold_usr2 and delivered once the handler exists, instead of killing it."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Stands in for submitit's job runner: slow imports, then the handler, then StageJob's unblock.
LATE_HANDLER = textwrap.dedent("""
    import signal, sys, time
    print("started", flush=True)
    time.sleep(1.5)
    signal.signal(signal.SIGUSR2, lambda *a: print("handled USR2", flush=True))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
    print("args", sys.argv[1:], flush=True)
""")


def run(tmp_path, *prefix: str) -> subprocess.CompletedProcess:
    (tmp_path / "late_handler.py").write_text(LATE_HANDLER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    p = subprocess.Popen([sys.executable, *prefix, "-u", "-m", "late_handler", "/some/folder"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.2)
    os.kill(p.pid, signal.SIGUSR2)  # before the handler, as Slurm may
    out, err = p.communicate(timeout=30)
    return subprocess.CompletedProcess(p.args, p.returncode, "started\n" + out, err)


def test_an_early_usr2_waits_for_the_handler(tmp_path):
    held = run(tmp_path, "-u", "-m", "runtime.hold_usr2")
    assert held.returncode == 0, held.stderr
    assert held.stdout.splitlines() == ["started", "handled USR2", "args ['/some/folder']"]


def test_without_it_the_same_usr2_kills_the_job(tmp_path):
    bare = run(tmp_path)
    assert bare.returncode == -signal.SIGUSR2 and "handled" not in bare.stdout


def test_the_slurm_job_command_starts_through_it():
    from jobs.executors.slurm import python_for

    assert python_for(None).endswith(" -u -m runtime.hold_usr2")
