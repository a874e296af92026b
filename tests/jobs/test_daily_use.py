"""What a person typing `jobs …` every day meets: config keys and rules checked at submit in our own
words, repeated options, filters with typos, and what submit prints at the end. No training here:
every case is refused before a run exists, or is a dry run."""
import shutil

import pytest

from helpers import run_jobs, tree_digest
from lineage import Store

BAD = [
    # unknown keys: ours, with the closest key, never Hydra's "+key" advice
    (["submit", "tiny", "--stage", "data", "data.n_sftt=5000"], "unknown config key data.n_sftt (did you mean data.n_sft?)"),
    (["submit", "tiny", "--stage", "data", "seeed=3"], "unknown config key seeed (did you mean seed?)"),
    (["submit", "tiny", "--stage", "data", "~data.n_sftt"], "unknown config key data.n_sftt (did you mean data.n_sft?)"),
    (["submit", "tiny", "--stage", "data", "data.n_sft.x=3"], "data.n_sft is a value, not a section"),
    # rules the stages applied only inside the job, now at submit
    (["submit", "tiny", "--stage", "data,pretrain", "pretrain.steps=30"],
     "tiny/pretrain: pretrain.warmup must be in [0, steps) (got 40, steps 30)"),
    (["submit", "tiny", "--stage", "data,pretrain,sft", "sft.min_lr_ratio=2"], "sft.min_lr_ratio must be in [0, 1]"),
    (["submit", "tiny", "--stage", "data,pretrain,sft,rm", "rm.log_every=0"], "rm.log_every must be >= 1"),
    (["submit", "tiny", "--stage", "data", "tracking.wandb=onlin"], "tracking.wandb must be one of offline, online, disabled"),
]


@pytest.fixture(scope="module")
def store_copy(data_store, tmp_path_factory):
    """One copy of the data store for the refusals of this module: each checks it is left unchanged."""
    store = tmp_path_factory.mktemp("daily") / "store"
    shutil.copytree(data_store, store)
    Store(store).index()
    return store


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a[3:]) for a, _ in BAD])
def test_refused_in_one_line_exit_2_nothing_written(store_copy, args, message):
    before = tree_digest(store_copy)
    r = run_jobs(store_copy, *args)
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith("jobs: error: ") and len(r.err.strip().splitlines()) == 1, r.err
    assert message in r.err, r.err
    assert "+data" not in r.err and "To append" not in r.err
    assert tree_digest(store_copy) == before


def test_config_rule_refused_before_the_store_exists(tmp_path):
    r = run_jobs(tmp_path / "fresh", "submit", "tiny", "--stage", "data,pretrain", "pretrain.steps=30")
    assert r.code == 2 and "pretrain.warmup must be in [0, steps)" in r.err
    assert not (tmp_path / "fresh").exists()


def test_stage_named_key_goes_to_its_stage_only(store_copy):
    r = run_jobs(store_copy, "submit", "tiny", "--stage", "data", "sft.lr=1e-4", "seed=7", "--dry-run")
    assert r.code == 0, r.err
    assert "sft.lr=1e-4: for stage(s) not selected here, so not used" in r.err
    assert '"seed": 7' in r.out and '"sft"' not in r.out
    both = run_jobs(store_copy, "submit", "tiny", "--stage", "data,pretrain,sft", "sft.lr=1e-4", "--dry-run")
    assert both.code == 0 and '"lr": 0.0001' in both.out and "not used" not in both.err


def test_repeated_stage_options_are_merged(store_copy):
    r = run_jobs(store_copy, "submit", "tiny", "--stage", "data", "--stage", "pretrain", "--dry-run")
    assert r.code == 0, r.err
    assert "### tiny/data " in r.out and "### tiny/pretrain " in r.out and "### tiny/sft " not in r.out
