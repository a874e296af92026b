"""Every recipe composes, its graph is consistent, its containers are in the lock, and its Slurm
scripts render. Through jobs.recipes directly (not make_plan): no stage module is imported, so
recipes whose GPU stages cannot be installed here are checked all the same."""
from pathlib import Path

import pytest
import yaml

import containers as pins
from jobs import containers
from jobs import profiles, recipes
from jobs.executors.slurm import render, sbatch_params
from jobs.plan import StagePlan

ALL = [(name, stage) for name in recipes.available() for stage in recipes.load(name).stages]
YAMLS = sorted(recipes.BUILTIN.rglob("*.yaml"))
# An artifact kind names one format everywhere. tiny's kinds, plus the formats only GPU recipes make.
KINDS = {"corpus", "tokenizer", "sft-data", "pref-data", "rl-prompts", "eval-data", "model",
         "reward-model", "eval-report", "hf-model", "pretrain-blend"}


def common_keys(recipe: recipes.Recipe) -> set[str]:
    if not (recipe.path / "common.yaml").is_file():
        return set()
    return set(recipes.compose(recipe, "common", []))


def test_the_project_ships_tiny_and_nano3():
    assert {"tiny", "nano3"} <= set(recipes.available())


@pytest.mark.parametrize("path", YAMLS, ids=[str(p.relative_to(recipes.BUILTIN)) for p in YAMLS])
def test_every_recipe_yaml_belongs_to_a_recipe_composes_and_has_a_header(path: Path):
    assert path.read_text().startswith("#"), f"{path}: starts without a header comment"
    folder = path.parent
    if folder.parent != recipes.BUILTIN:        # deeper: a Hydra config group option, composed by a stage
        assert isinstance(yaml.safe_load(path.read_text()), dict)
        return
    assert (folder / "recipe.yaml").is_file(), f"{path}: no recipe.yaml beside it"
    recipe = recipes.load(folder.name)
    if path.stem == "recipe":
        return                                  # recipes.load above read it
    assert path.stem == "common" or path.stem in recipe.stages, \
        f"{path}: no stage {path.stem!r} in {folder.name}/recipe.yaml (a typo, or a stage was renamed)"
    recipes.compose(recipe, path.stem, [])


@pytest.mark.parametrize("name,stage", ALL, ids=[f"{n}/{s}" for n, s in ALL])
def test_stage_composes_with_its_own_section_and_a_known_container(name, stage):
    recipe = recipes.load(name)
    spec = recipe.stage(stage)
    cfg = recipes.compose(recipe, stage, [])
    assert isinstance(cfg.get(stage), dict), f"{name}/{stage}.yaml has no `{stage}:` section"
    assert set(cfg) - common_keys(recipe) == {stage}, "a stage file adds its own section and nothing else"
    for inp in spec.inputs:
        assert recipe.stages[inp.stage].outputs[inp.output] == inp.kind
    assert set(spec.outputs.values()) <= KINDS, f"unknown artifact kind in {spec.outputs}"
    if spec.container:
        assert spec.container in containers.load_lock(), f"container {spec.container!r} is not in containers.lock"


def test_a_module_shared_by_recipes_gets_the_same_input_roles_and_output_names():
    seen: dict[str, tuple] = {}
    for name in recipes.available():
        for spec in recipes.load(name).stages.values():
            if spec.module == "stages.prep":     # one module, three nano3 stages with different outputs
                continue
            shape = (sorted(i.role for i in spec.inputs), sorted(spec.outputs))
            assert seen.setdefault(spec.module, shape) == shape, f"{name}/{spec.name}: {spec.module} used differently"


def test_the_lock_is_well_formed_and_never_pins_a_made_up_digest():
    raw = yaml.safe_load(pins.LOCK.read_text())
    for name, entry in raw.items():
        assert ":" in entry["image"].rsplit("/", 1)[-1], f"{name}: image without a tag"
        assert entry.get("for"), f"{name}: say what uses it"
        assert entry["digest"] is None or pins.DIGEST.match(entry["digest"]), f"{name}: bad digest"
        assert entry["digest"] != "sha256:" + "0" * 64, f"{name}: a placeholder is not a pin; use null"
    assert raw["nemo"]["image"] == "nvcr.io/nvidia/nemo:25.11.nemotron_3_nano"
    assert raw["nemo-rl"]["image"] == "nvcr.io/nvidia/nemo-rl:v0.4.0.nemotron_3_nano"
    # the library versions the images carry, each with a field list read from its upstream source
    from stages.backends.megatron.config import upstream
    assert raw["nemo"]["libraries"]["megatron_bridge"] in upstream()["megatron_bridge"]
    assert raw["nemo-rl"]["libraries"]["nemo_rl"] in upstream()["nemo_rl"]


@pytest.mark.parametrize("name,stage", ALL, ids=[f"{n}/{s}" for n, s in ALL])
def test_every_stage_renders_an_sbatch_script(name, stage, tmp_path):
    spec = recipes.load(name).stage(stage)
    image = containers.resolve(spec.container, allow_unpinned=True) if spec.container else None
    as_run = StagePlan(recipe=name, stage=stage, module=spec.module, config={}, inputs={}, upstream={}, input_kinds={},
                       outputs={}, resources=spec.resources, container=spec.container, ray=False)
    script = render(sbatch_params(as_run, profiles.Profile(), tmp_path, image), tmp_path, "python3")
    assert f"#SBATCH --nodes={spec.resources.get('nodes', 1)}" in script
    assert ("#SBATCH --gpus-per-node=" in script) == bool(spec.resources.get("gpus_per_node"))


def test_eval_asks_only_for_k_it_can_estimate():
    for name in recipes.available():
        recipe = recipes.load(name)
        if "eval" in recipe.stages:
            e = recipes.compose(recipe, "eval", [])["eval"]
            assert max(e["ks"]) <= e["n_samples"], name


# nano3: checks a GPU cluster would otherwise only make after the queue wait.

def nano3(stage: str, overrides: tuple = ()) -> tuple[dict, dict]:
    recipe = recipes.load("nano3")
    return recipes.compose(recipe, stage, list(overrides))[stage], recipe.stage(stage).resources


def test_nano3_gpu_stages_ask_for_whole_nodes_and_ray_where_needed():
    recipe = recipes.load("nano3")
    for s in ("pretrain", "sft", "rm", "rl", "eval"):
        assert recipe.stage(s).resources["gpus_per_node"] == 8, s
    assert recipe.stage("rl").ray and recipe.stage("rl").container == "nemo-rl"
    assert recipe.stage("rm").container == "nemo-rl" and recipe.stage("export").resources.get("gpus_per_node") is None


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_nano3_megatron_layouts_fit_their_allocation(stage):
    cfg, res = nano3(stage)
    m, t = cfg["model"], cfg["train"]
    gpus = res["nodes"] * res["gpus_per_node"]
    replica = m["tensor_model_parallel_size"] * m["pipeline_model_parallel_size"] * m["context_parallel_size"]
    assert gpus % replica == 0
    data_parallel = gpus // replica
    assert t["global_batch_size"] % (t["micro_batch_size"] * data_parallel) == 0
    assert (gpus // m["pipeline_model_parallel_size"]) % (m["expert_model_parallel_size"] * m["expert_tensor_parallel_size"]) == 0
    assert not m["sequence_parallel"] or m["tensor_model_parallel_size"] > 1
    assert m["tensor_model_parallel_size"] <= res["gpus_per_node"], "TP across nodes: over the network"


def test_nano3_settings_that_two_stages_must_agree_on():
    prep_sft, _ = nano3("prep_sft")
    assert nano3("sft")[0]["dataset"]["seq_length"] == prep_sft["pack_size"]
    assert nano3("rm")[0]["policy"]["max_total_sequence_length"] == prep_sft["prefs"]["max_tokens"]
    prep_rl, _ = nano3("prep_rl")
    assert set(prep_rl["mix"]) == set(nano3("rl")[0]["env"]), "every prompt's environment runs in rl"


def test_nano3_rl_batch_fits_the_policy_nodes_and_saves_before_the_time_limit():
    rl, res = nano3("rl")
    policy, grpo = rl["policy"], rl["grpo"]
    mc = policy["megatron_cfg"]
    rm_nodes = rl["env"].get("reward_model", {}).get("resources", {}).get("num_nodes", 0)   # a reward-model env's own nodes
    policy_gpus = (res["nodes"] - rm_nodes) * res["gpus_per_node"]
    data_parallel = policy_gpus // (mc["tensor_model_parallel_size"] * mc["pipeline_model_parallel_size"]
                                    * mc["context_parallel_size"])
    rollouts = grpo["num_prompts_per_step"] * grpo["num_generations_per_prompt"]
    assert rollouts % policy["train_global_batch_size"] == 0
    assert policy["train_global_batch_size"] % data_parallel == 0
    assert policy_gpus % policy["generation"]["vllm_cfg"]["tensor_parallel_size"] == 0
    d, h, m, s = (int(x) for x in rl["checkpointing"]["checkpoint_must_save_by"].split(":"))
    assert d * 1440 + h * 60 + m + s / 60 < res["time_min"]
    assert rl["loss_fn"]["ratio_clip_max"] >= rl["loss_fn"]["ratio_clip_min"]


def test_nano3_eval_engines_fill_one_node():
    ev, res = nano3("eval")
    v = ev["vllm_cfg"]
    assert v["tensor_parallel_size"] * v["data_parallel_size"] == res["gpus_per_node"]
    assert v["max_model_len"] > ev["max_new_tokens"]


def test_overrides_route_to_the_stage_they_name_and_reach_nested_knobs():
    routed = recipes.split_overrides(["sft.lr=1", "seed=3", "+rl.x=1"], ["sft", "rl"])
    assert routed == {"sft": ["sft.lr=1", "seed=3"], "rl": ["seed=3", "+rl.x=1"]}
    cfg, _ = nano3("rl", ("rl.grpo.num_prompts_per_step=64", "rl.policy.train_global_batch_size=1024"))
    assert cfg["grpo"]["num_prompts_per_step"] == 64 and cfg["policy"]["generation"]["max_new_tokens"] == 16384
    cfg, _ = nano3("rl", ("rl.policy.max_total_sequence_length=32768",))
    assert cfg["policy"]["generation"]["vllm_cfg"]["max_model_len"] == 32768   # interpolated, follows the override
