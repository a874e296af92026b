"""Which CPU kernels torch runs on this machine: part of a run's environment.

torch's CPU operators come in one build per instruction set (DEFAULT, AVX2, AVX512 on x86) and it
picks one at its first operator call: `$ATEN_CPU_CAPABILITY` when it names one exactly (lowercase),
else the best the CPU offers (AVX512 needs avx512vl, avx512bw, avx512dq and fma; AVX2 needs avx2
and fma). The builds sum and multiply in other orders, so the same training run gives other floats
on an AVX2 and an AVX512 machine: a record names the kernels, `jobs reproduce` compares them, and
`ATEN_CPU_CAPABILITY=avx2` (exported to Slurm jobs with the rest of the environment) pins them.

Answered from the environment and /proc/cpuinfo, without importing torch, so the launcher can ask
too; tests/jobs/test_cpu_kernels.py holds the answer equal to torch's own
(`torch.backends.cpu.get_cpu_capability()`).
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

ENV = "ATEN_CPU_CAPABILITY"
X86_KERNELS = ("avx512", "avx2", "default")   # best first
_NEEDS = {"avx512": {"avx512vl", "avx512bw", "avx512dq", "fma"}, "avx2": {"avx2", "fma"}}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def cpu_kernels(environ=os.environ, flags: set[str] | None = None) -> str | None:
    """"avx512", "avx2" or "default" on x86-64; None elsewhere (not modelled: not compared)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    pinned = environ.get(ENV)
    if pinned in X86_KERNELS:
        return pinned
    have = cpu_flags() if flags is None else flags
    return next((k for k in X86_KERNELS[:-1] if _NEEDS[k] <= have), "default")
