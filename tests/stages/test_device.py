"""The `device` key: a device the stage cannot have is refused by `jobs submit` in one line, before
anything is recorded; a GPU the Slurm job will get is accepted without one here. That `device: cpu`
leaves the arithmetic as it was is held by the tests that pin learned numbers and resumed bytes."""
import pytest

from helpers import run_jobs, tree_digest
from jobs import recipes
from stages import eval as eval_stage
from stages import pretrain, rl, sft
from stages.ml import lm

STAGES = {"pretrain": pretrain, "sft": sft, "rl": rl, "eval": eval_stage}

pytestmark = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")


@pytest.mark.parametrize("override,message", [
    ("device=cuda", "tiny/pretrain: device is cuda, but no CUDA device is visible here and the stage's resources "
                    "ask for no GPU (gpus_per_node): use device=cpu, or device=auto to take a GPU when there is one"),
    ("device=gpu", "tiny/pretrain: device must be one of cpu, cuda, auto (got 'gpu')"),
])
def test_a_device_the_stage_cannot_have_is_refused_at_submit_and_nothing_is_recorded(tmp_path, override, message):
    store = tmp_path / "store"
    before = tree_digest(store)
    r = run_jobs(store, "submit", "tiny", "--stage", "all", override)
    assert r.code == 2, r.out + r.err
    assert r.err.strip().splitlines() == [f"jobs: error: {message}"]
    assert tree_digest(store) == before


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_device_stage_checks_the_key_and_accepts_a_gpu_the_job_will_get(stage):
    recipe = recipes.load("tiny")
    check = STAGES[stage].check_config
    resources = dict(recipe.stages[stage].resources)
    assert check(recipes.compose(recipe, stage, []), resources=resources) == []
    assert check(recipes.compose(recipe, stage, ["device=auto"]), resources=resources) == []
    cuda = recipes.compose(recipe, stage, ["device=cuda"])
    assert [p for p in check(cuda, resources=resources) if p.startswith("device is cuda")]
    assert check(cuda, resources={**resources, "gpus_per_node": 1}) == []


def test_device_of_resolves_auto_to_what_this_node_has_and_refuses_cuda_without_one():
    assert lm.device_of({}) == "cpu"                      # recipes without the key (nano3's torch path) stay on CPU
    assert lm.device_of({"device": "auto"}) == "cpu"
    with pytest.raises(lm.StageError, match="torch sees no CUDA device"):
        lm.device_of({"device": "cuda"})


def test_rl_actors_are_ray_or_local_and_local_ones_need_no_ray(tmp_path):
    recipe = recipes.load("tiny")
    assert rl.check_config(recipes.compose(recipe, "rl", ["rl.cluster.actors=local"])) == []
    assert rl.check_config(recipes.compose(recipe, "rl", ["rl.cluster.actors=moon"])) == \
        ["rl.cluster.actors must be one of ray, local (got 'moon')"]
    # The plan gives the job a Ray cluster only when its actors live there; an image without Ray then
    # runs the stage (tests/stages/test_rl.py: the pipeline's in-process run started no cluster).
    from jobs.plan import make_plan
    from lineage import Store
    from runtime import image

    for actors, ray in (("ray", True), ("local", False)):
        plan = make_plan(Store(tmp_path / "store"), "tiny", "all", overrides=[f"rl.cluster.actors={actors}"])
        (stage,) = [s for s in plan.stages if s.stage == "rl"]
        assert stage.ray is ray and ("ray" in image.needs(vars(stage))) is ray


def test_a_second_node_of_an_rl_run_with_local_actors_has_no_part(tmp_path):
    """Without Ray nothing else runs there: rank 1 returns at once, before it reads an input (none of
    these paths exists) or loads a model."""
    from stages.contract import Distributed, StageContext

    config = recipes.compose(recipes.load("tiny"), "rl", ["rl.cluster.actors=local", "tracking.wandb=disabled"])
    missing = {role: tmp_path / "absent" / role for role in ("policy", "prompts", "prefs", "reward_model")}
    ctx = StageContext(run_id="run-a", recipe="tiny", stage="rl", config=config, inputs=missing, run_dir=tmp_path,
                       dist=Distributed(rank=1, world_size=2, nodes=["node1", "node2"]))
    assert rl.run(ctx) == {}
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OSError):   # rank 0 of the same context does read its inputs
        rl.run(StageContext(**{**vars(ctx), "dist": Distributed(rank=0, world_size=2, nodes=["node1", "node2"])}))
