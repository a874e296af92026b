"""nano3's prep_pretrain on the recipe's two-node allocation on the dev cluster: its Ray tasks spread
over both nodes and write the same tokens as a direct tokenization (tests/stages/test_prep.py checks
the rest of the prep stages without a cluster)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
import make  # noqa: E402
from test_prep import QUIET, _direct_docs  # noqa: E402

pytestmark = pytest.mark.slurm


def test_prep_pretrain_on_two_slurm_nodes_tokenizes_on_both(tmp_path, slurm_cluster):
    src = tmp_path / "src"
    make.make(src)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, containers: false, cpus_per_task: 2, mem_gb: 2, time: 20}\n")
    env = {"JOBS_PROFILES": str(profiles)}
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "nano3", "--stage", "prep_pretrain", "--executor", "slurm", "--profile", "dev",
                 "--allow-unpinned", *QUIET, *make.overrides(src)["prep_pretrain"], env=env)
    assert r.code == 0, r.out + r.err
    (run,) = [line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        run_jobs(store, "status", run, env=env)
        view = Store(store).run(run)
        if view.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(2)
    assert view.state == "SUCCEEDED", (view.state, view.reason)
    assert view.metrics["prep/ray_nodes"] == 2
    direct = _direct_docs(src)
    assert view.metrics["prep/tokens"] == sum(len(d) for docs in direct.values() for d in docs)
