"""Executors turn recorded runs into processes: `local` (submitit's local executor) and `slurm`."""
from __future__ import annotations

NAMES = ("local", "slurm")
