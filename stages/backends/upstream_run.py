"""Running an upstream program (NeMo RL's drivers and converters, Megatron-Bridge's rendered scripts under
python or torchrun, vLLM's engines for eval) from a stage: its output goes into the job's log as it comes,
and its last lines are kept, so that a non-zero exit that ends in a refusal to go on without a GPU (the
program's first GPU request on a machine with none) becomes GpuBoundary with the refusing file and line
(lineage.failures.gpu_boundary); any other non-zero exit is CalledProcessError."""
from __future__ import annotations

import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Callable

from stages.contract import GpuBoundary

#: The program's last lines kept to read a refusal from (its traceback ends there).
TAIL_LINES = 200


class Program:
    """One upstream program started: its output (one stream, stderr and stdout, where the job's log keeps
    tracebacks: the refusal is read in the order it was written, torchrun's workers' output included)
    copied to the job's stderr line by line, its last lines kept. Several may run at once (eval's engines):
    each line goes out whole."""

    def __init__(self, cmd: list[str], cwd: Path | None = None, env: dict | None = None, stdin=None):
        self.cmd = cmd
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            sys.stderr.write(line)
            self.tail.append(line)

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.__exit__(*exc)   # as Popen's own: waits for the program, closes its stream

    def ended(self) -> int:
        """Its exit code, when it has ended and all its output is in the log (waits for both)."""
        self.proc.wait()
        self._reader.join()
        self.proc.stdout.close()
        sys.stderr.flush()
        return self.proc.returncode

    def boundary(self) -> dict | None:
        """Where it was refused for want of a GPU ({"file", "line", "message", "error"}), when it ended so."""
        from lineage.failures import gpu_boundary

        return gpu_boundary(self.tail) if self.ended() else None

    def check(self) -> None:
        """Raise what its end means: GpuBoundary, CalledProcessError, or nothing for a clean exit."""
        where = self.boundary()
        if where:
            raise GpuBoundary(where)
        if self.proc.returncode:
            raise subprocess.CalledProcessError(self.proc.returncode, self.cmd)


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None,
        while_running: Callable[[subprocess.Popen], None] | None = None, every_s: float = 2.0) -> None:
    """Run `cmd` to its end (Program.check). `while_running(proc)` is called every `every_s` seconds
    meanwhile (a stage watching for Slurm's signal)."""
    with Program(cmd, cwd=cwd, env=env) as program:
        while True:
            try:
                program.proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                if while_running:
                    while_running(program.proc)
        program.check()
