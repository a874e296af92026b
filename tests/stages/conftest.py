"""One run of the whole tiny pipeline through the real CLI, shared by every test that reads it."""

import pytest

from helpers import run_jobs
from lineage import Store


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("tiny pipeline") / "store"
    # The rl stage's actors in its own process: the bytes Ray actors write (test_resume_integrity.py),
    # without a Ray cluster and three more processes importing torch; tests/slurm run rl on Ray.
    r = run_jobs(root, "submit", "tiny", "--stage", "all", "rl.cluster.actors=local", timeout=1800)
    assert r.code == 0, r.out + r.err
    (root.parent / "submit-all.out").write_text(r.out)   # what the user saw: test_pipeline reads the results
    # The pretrained and SFT models on the same held-out split: the baselines SFT and RL must beat.
    for upstream in ("pretrain", "sft"):
        r = run_jobs(root, "submit", "tiny", "--stage", "eval", "--input", f"model=tiny/{upstream}/model:latest",
                     "tracking.wandb=disabled", timeout=600)
        assert r.code == 0, r.out + r.err
    return Store(root)
