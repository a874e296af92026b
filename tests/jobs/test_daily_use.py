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
    (["submit", "tiny", "--stage", "data,pretrain", "pretrain.warmup=-1"],
     "tiny/pretrain: pretrain.warmup must be >= 0 (got -1)"),
    (["submit", "tiny", "--stage", "data,pretrain,sft", "sft.min_lr_ratio=2"], "sft.min_lr_ratio must be in [0, 1]"),
    (["submit", "tiny", "--stage", "data,pretrain,sft,rm", "rm.log_every=0"], "rm.log_every must be >= 1"),
    (["submit", "tiny", "--stage", "data", "tracking.wandb=onlin"], "tracking.wandb must be one of offline, online, disabled"),
    # filters with typos: refused with the known values, not an empty listing
    (["artifacts", "--kind", "modle"], "unknown --kind value 'modle' (did you mean model? known: "),
    (["artifacts", "--recipe", "tinyy"], "unknown --recipe value 'tinyy' (did you mean tiny? known: nano3, tiny)"),
    (["list", "--stage", "sftt"], "unknown --stage value 'sftt' (did you mean sft? known: "),
    # a missing artifact names the store it was looked for in
    (["lineage", "tiny/nothing/here:latest"], "no artifact is named 'tiny/nothing/here' in {store} "),
    (["submit", "tiny", "--stage", "pretrain", "--input", "corpus=mine/corpus:latest"], "no artifact is named 'mine/corpus' in {store} "),
    (["lineage", "not-a-run"], "'not-a-run' is neither an artifact ID (art_…), an alias (name:latest, name:vN) nor a run ID"),
]


@pytest.fixture(scope="module")
def store_copy(data_store, tmp_path_factory):
    """One copy of the data store for the refusals of this module: each checks it is left unchanged."""
    store = tmp_path_factory.mktemp("daily") / "store"
    shutil.copytree(data_store, store)
    Store(store).index()
    return store


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a[1:] if a[0] == "submit" else a) for a, _ in BAD])
def test_refused_in_one_line_exit_2_nothing_written(store_copy, args, message):
    before = tree_digest(store_copy)
    r = run_jobs(store_copy, *args)
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith("jobs: error: ") and len(r.err.strip().splitlines()) == 1, r.err
    assert message.format(store=store_copy) in r.err, r.err
    assert "+data" not in r.err and "To append" not in r.err
    assert tree_digest(store_copy) == before


def test_config_rule_refused_before_the_store_exists(tmp_path):
    r = run_jobs(tmp_path / "fresh", "submit", "tiny", "--stage", "data,pretrain", "pretrain.warmup=-1")
    assert r.code == 2 and "pretrain.warmup must be >= 0" in r.err
    assert not (tmp_path / "fresh").exists()


SHORT = [("data,pretrain", "pretrain.steps=30", "pretrain.warmup 40 is not below pretrain.steps 30: this run warms up over 3"),
         ("data,pretrain,sft", "sft.steps=20", "sft.warmup 100 is not below sft.steps 20: this run warms up over 2"),
         ("data,pretrain,sft,rm", "rm.steps=10", "rm.warmup 30 is not below rm.steps 10: this run warms up over 1"),
         ("data,pretrain,sft,rm,rl", "rl.grpo.max_num_steps=3", None)]


@pytest.mark.parametrize("stages,short,note", SHORT, ids=[s for _, s, _ in SHORT])
def test_a_short_run_of_each_stage_is_accepted_with_its_warmup_said(store_copy, stages, short, note):
    """A recipe's warmup suits its full length; a short run shortens it and says so in one line."""
    before = tree_digest(store_copy)
    r = run_jobs(store_copy, "submit", "tiny", "--stage", stages, short, "--dry-run")
    assert r.code == 0, r.err
    notes = [line for line in r.err.splitlines() if "warmup" in line]
    if note is None:   # rl keeps its warmup as given: a short rl run was always accepted
        assert notes == [], r.err
    else:
        (line,) = notes
        assert line.startswith(f"jobs: note: tiny/{short.split('.')[0]}: {note} step(s)"), r.err
    assert tree_digest(store_copy) == before


def test_full_length_runs_keep_the_recipes_warmup_exactly():
    """The recipe's own lengths run the warmup they always ran: their artifacts stay byte-identical."""
    from jobs import recipes
    from stages.ml.loop import Schedule

    recipe = recipes.load("tiny")
    for stage in ("pretrain", "sft", "rm"):
        cfg = recipes.compose(recipe, stage, [])[stage]
        schedule = Schedule.from_config(cfg)
        assert 0 < schedule.warmup == cfg["warmup"] < schedule.steps == cfg["steps"], stage
        assert Schedule.notes(cfg, stage) == []
    short = Schedule.from_config({**cfg, "steps": 20})
    assert short.warmup == 2 and short.factor(0) == 0.5 and short.factor(1) == 1.0 > short.factor(10)


def test_show_and_dry_run_name_each_input_and_output(store_copy):
    """An art_… ID alone says nothing to a reader: each is followed by the version it was made as."""
    s = Store(store_copy)
    (run,) = [r["id"] for r in s.index().runs()]
    shown = run_jobs(store_copy, "show", run)
    assert shown.code == 0, shown.err
    sft = s.run(run).outputs["sft"]
    assert f"output    sft        {sft}  (tiny/data/sft:v1)" in shown.out.splitlines(), shown.out
    dry = run_jobs(store_copy, "submit", "tiny", "--stage", "pretrain", "--dry-run")
    assert dry.code == 0, dry.err
    corpus = s.run(run).outputs["corpus"]
    assert f"input  corpus     {corpus}  (tiny/data/corpus:v1)" in dry.out.splitlines(), dry.out


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


def test_version_lineage_of_a_run_and_a_profile_with_the_local_executor(store_copy, tmp_path):
    v = run_jobs(store_copy, "--version")
    assert v.code == 0 and v.out.startswith("jobs 0.1.0 (") and v.err == ""

    s = Store(store_copy)
    (run,) = [r["id"] for r in s.index().runs()]
    outputs = s.run(run).outputs
    text = run_jobs(store_copy, "lineage", run[:13])                  # a run: the lineage of each output
    assert text.code == 0, text.err
    assert text.out.count("ancestry:") == len(outputs) == 6 and "tiny/data/sft:v1" in text.out
    as_json = run_jobs(store_copy, "lineage", run, "--json")
    doc = __import__("json").loads(as_json.out)                      # one document: each output's graph by name
    assert doc["run"] == run and {k: g["artifact"] for k, g in doc["outputs"].items()} == outputs
    dot = run_jobs(store_copy, "lineage", run, "--format", "dot")      # one picture per artifact: say which
    assert dot.code == 2 and f"sft={outputs['sft'][:16]}" in dot.err and len(dot.err.splitlines()) == 1

    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("dev: {partition: debug, time: 10}\n")
    r = run_jobs(store_copy, "submit", "tiny", "--stage", "data", "--profile", "dev", "--dry-run",
                 env={"JOBS_PROFILES": str(profiles)})
    assert r.code == 0, r.err
    assert "note: --profile dev with the local executor: nothing of it is used; its partition, time apply to " \
           "--executor slurm only" in r.out
