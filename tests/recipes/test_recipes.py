"""Every recipe composes: each stage's YAML, its inputs' kinds, its container in the lock."""
import pytest

from jobs import containers, recipes

ALL = [(name, stage) for name in recipes.available() for stage in recipes.load(name).stages]


def test_the_project_ships_tiny_and_nano3():
    assert {"tiny", "nano3"} <= set(recipes.available())


@pytest.mark.parametrize("name,stage", ALL, ids=[f"{n}/{s}" for n, s in ALL])
def test_stage_composes_and_its_inputs_and_container_exist(name, stage):
    recipe = recipes.load(name)
    spec = recipe.stage(stage)
    cfg = recipes.compose(recipe, stage, [])
    assert stage in cfg and isinstance(cfg[stage], dict)
    for inp in spec.inputs:
        assert recipe.stages[inp.stage].outputs[inp.output] == inp.kind
    if spec.container:
        assert spec.container in containers.load_lock()


def test_nano3_gpu_stages_ask_for_gpus_and_rl_for_ray():
    nano3 = recipes.load("nano3")
    assert all(nano3.stage(s).resources["gpus_per_node"] == 8 for s in ("pretrain", "sft", "rl"))
    assert nano3.stage("rl").ray and nano3.stage("rl").container == "nemo-rl"


def test_overrides_route_to_the_stage_they_name():
    routed = recipes.split_overrides(["sft.lr=1", "seed=3", "+rl.x=1"], ["sft", "rl"])
    assert routed == {"sft": ["sft.lr=1", "seed=3"], "rl": ["seed=3", "+rl.x=1"]}
