"""The real dev Slurm cluster, started once per test session by the project's own script (idempotent)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from devcluster import UP, SlurmCluster
from helpers import run_jobs


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """Start (or just check) the dev cluster via dev/slurm/up.sh: fast when it is already up."""
    p = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"dev/slurm/up.sh failed:\n{p.stdout}\n{p.stderr}"
    return SlurmCluster()


# The upstream of the Slurm RL tests: a barely trained SFT model and reward model are enough to exercise
# the machinery (learning is tests/stages/test_rl.py).
QUICK = ["pretrain.steps=20", "pretrain.warmup=5", "sft.steps=20", "sft.warmup=5", "rm.steps=5", "rm.warmup=1",
         "tracking.wandb=disabled", "tracking.tensorboard=false"]


@pytest.fixture(scope="session")
def quick_upstream(data_store, tmp_path_factory) -> Path:
    """A store in which data (tests/conftest.py's), pretrain, sft and rm ran once (locally, QUICK)."""
    root = tmp_path_factory.mktemp("quick upstream") / "store"
    shutil.copytree(data_store, root, symlinks=True)
    r = run_jobs(root, "submit", "tiny", "--stage", "pretrain,sft,rm", *QUICK, timeout=900)
    assert r.code == 0, r.err
    return root


@pytest.fixture
def upstream_store(quick_upstream, tmp_path) -> Path:
    """This test's own store, a copy of `quick_upstream`'s (records and refs; the artifacts' recorded
    paths still name the shared store's folders, which no test writes)."""
    store = tmp_path / "store"
    shutil.copytree(quick_upstream, store, symlinks=True)
    return store
