"""Running an upstream program (NeMo RL's drivers and converters, Megatron-Bridge's rendered scripts under
python or torchrun) from a stage: its output goes into the job's log as it comes, and its last lines are
kept, so that a non-zero exit that ends in a refusal to go on without a GPU (the program's first GPU
request on a machine with none) becomes GpuBoundary with the refusing file and line
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


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None,
        while_running: Callable[[subprocess.Popen], None] | None = None, every_s: float = 2.0) -> None:
    """Run `cmd` to its end. `while_running(proc)` is called every `every_s` seconds meanwhile (a stage
    watching for Slurm's signal). One stream (stderr, where the job's log keeps tracebacks): the
    refusal is read in the order it was written, torchrun's workers' output included."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def pump(stream) -> None:
        for line in stream:
            sys.stderr.write(line)
            tail.append(line)

    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
        reader.start()
        while True:
            try:
                proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                if while_running:
                    while_running(proc)
        reader.join()
    sys.stderr.flush()
    if proc.returncode:
        from lineage.failures import gpu_boundary

        where = gpu_boundary(tail)
        if where:
            raise GpuBoundary(where)
        raise subprocess.CalledProcessError(proc.returncode, cmd)
