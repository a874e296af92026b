"""One run of the whole tiny pipeline through the real CLI, shared by every test that reads it."""
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("tiny pipeline") / "store"
    r = run_jobs(root, "submit", "tiny", "--stage", "all", timeout=1800)
    assert r.code == 0, r.out + r.err
    # The pretrained and SFT models on the same held-out split: the baselines SFT and RL must beat.
    for upstream in ("pretrain", "sft"):
        r = run_jobs(root, "submit", "tiny", "--stage", "eval", "--input", f"model=tiny/{upstream}/model:latest",
                     "tracking.wandb=disabled", timeout=600)
        assert r.code == 0, r.out + r.err
    return Store(root)


def latest(store: Store, stage: str, **match):
    """The newest SUCCEEDED run of `stage` whose inputs include `match`."""
    for row in store.index().runs(stage=stage):
        view = store.run(row["id"])
        if view.state == "SUCCEEDED" and all(view.inputs.get(k) == v for k, v in match.items()):
            return view
    raise AssertionError(f"no succeeded {stage} run with inputs {match}")


def artifact_path(store: Store, art: str) -> Path:
    return Path(store.artifact(art)["path"])
