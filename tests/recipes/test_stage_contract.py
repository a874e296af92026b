"""The stage contract, for every stage of every recipe: its module imports without GPU libraries, has
`run(ctx)` and `check_config(config) -> list[str]`, accepts its own composed config, and refuses a
broken copy of it in one line at submit (through jobs.plan, as `jobs submit` calls it)."""
import ast
import copy
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from jobs import plan, recipes
from jobs.errors import RecipeError

ALL = [(name, stage) for name in recipes.available() for stage in recipes.load(name).stages]
GPU_LIBRARIES = ("megatron", "nemo_rl", "transformer_engine", "vllm", "apex")


CASES = [pytest.param(n, s, id=f"{n}/{s}") for n, s in ALL]


def composed(name: str, stage: str):
    recipe = recipes.load(name)
    return recipe.stage(stage), recipes.compose(recipe, stage, [])


def call_check(module, config: dict, resources: dict) -> list[str]:
    check = module.check_config
    if "resources" in inspect.signature(check).parameters:
        return check(config, resources=resources)
    return check(config)


# Imports the module and runs check_config on its composed configs in a fresh interpreter with no GPU,
# then says which GPU libraries got imported and whether CUDA was initialised.
PROBE = """
import inspect, json, sys
module_name, configs = sys.argv[1], json.loads(sys.stdin.read())
module = __import__(module_name, fromlist=["run"])
for config, resources in configs:
    check = module.check_config
    takes = "resources" in inspect.signature(check).parameters
    check(config, resources=resources) if takes else check(config)
gpu = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
torch = sys.modules.get("torch")
cuda = bool(torch is not None and hasattr(torch, "cuda") and torch.cuda.is_initialized())
print(json.dumps({"gpu_libraries": gpu, "cuda_initialized": cuda}))
"""


@pytest.mark.parametrize("name,stage", CASES)
def test_module_imports_and_checks_its_config_without_gpu_libraries(name, stage):
    spec, config = composed(name, stage)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, "-c", PROBE, spec.module, ",".join(GPU_LIBRARIES)],
                       input=json.dumps([[config, spec.resources]]), capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1]) == {"gpu_libraries": [], "cuda_initialized": False}


@pytest.mark.parametrize("name,stage", CASES)
def test_module_has_run_and_check_config_and_accepts_its_composed_config(name, stage):
    spec, config = composed(name, stage)
    module = importlib.import_module(spec.module)
    assert callable(getattr(module, "run", None)), f"{spec.module} has no run(ctx)"
    assert callable(getattr(module, "check_config", None)), f"{spec.module} has no check_config(config)"
    assert list(inspect.signature(module.check_config).parameters)[0] == "config"
    assert call_check(module, config, spec.resources) == []
    plan._check_config(name, spec, config)          # what `jobs submit` runs: raises on any problem


@pytest.mark.parametrize("name,stage", CASES)
def test_every_stage_declares_its_results_gate(name, stage):
    """A stage says what its outputs must show before they are registered (stages/gate.py): none
    relies on having written its folders alone."""
    spec, config = composed(name, stage)
    module = importlib.import_module(spec.module)
    gate = getattr(module, "gate", None)
    assert callable(gate) and list(inspect.signature(gate).parameters) == ["ctx", "produced"], spec.module
    if spec.module == "stages.prep":   # one module for three stages: each has its own checks
        from stages.prep import _module

        assert callable(getattr(_module(stage), "gate", None)), stage


def first_number(section: dict, path: tuple = ()):
    """The first int/float leaf (not a bool) of a nested section, depth first, in file order."""
    for key, value in section.items():
        if isinstance(value, dict):
            found = first_number(value, (*path, key))
            if found:
                return found
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return (*path, key)
    return None


def broken_copies(stage: str, config: dict):
    """Copies of a good config that no stage may accept: its section gone, not a mapping, or its
    first number given as a string."""
    gone = copy.deepcopy(config)
    del gone[stage]
    yield "section removed", gone
    yield "section not a mapping", {**copy.deepcopy(config), stage: "oops"}
    path = first_number(config[stage])
    if path:
        retyped = copy.deepcopy(config)
        node = retyped[stage]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = "abc"
        yield f"{stage}.{'.'.join(path)}='abc'", retyped


@pytest.mark.parametrize("name,stage", CASES)
def test_a_broken_copy_of_the_config_is_refused_in_one_line(name, stage):
    spec, config = composed(name, stage)
    for what, bad in broken_copies(stage, config):
        with pytest.raises(RecipeError) as e:
            plan._check_config(name, spec, bad)
        message = str(e.value)
        assert message.startswith(f"{name}/{stage}: ") and "\n" not in message, (what, message)


# ---- the CLI, as a user types it ---------------------------------------------------------------

def test_a_bad_value_is_refused_at_submit_in_one_line_and_nothing_is_written(tmp_path):
    store = tmp_path / "store"
    for value in ("abc", "-5", "1e30", "10**12"):
        r = run_jobs(store, "submit", "tiny", "--stage", "data", f"data.n_sft={value}", "--dry-run")
        assert r.code == 2 and r.out == "", (value, r.err)
        assert len(r.err.strip().splitlines()) == 1 and "data.n_sft must be an integer" in r.err, r.err
    assert tree_digest(store) == "absent"


def test_nano3_dry_run_on_slurm_checks_every_stage_and_exits_0(tmp_path):
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "nano3", "--stage", "all", "--executor", "slurm", "--dry-run",
                 env={"JOBS_PROFILES": str(tmp_path / "no-profiles.yaml")})
    assert r.code == 0, r.err
    assert all(f"### nano3/{stage}" in r.out for stage in recipes.load("nano3").stages)
    assert tree_digest(store) == "absent"


# ---- how a stage refuses ---------------------------------------------------------------------

BARE = {"ValueError", "RuntimeError", "Exception", "AssertionError"}


def bare_raises(source: str, filename: str = "<stage>") -> list[str]:
    """`raise ValueError(...)`-like statements: a refusal the runtime cannot tell from a crash."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BARE:
                found.append(f"{filename}:{node.lineno} raise {exc.id}")
    return found


def test_stages_refuse_with_stage_error_not_a_bare_exception():
    root = Path(__file__).resolve().parents[2] / "stages"
    found = [hit for p in sorted(root.rglob("*.py")) for hit in bare_raises(p.read_text(), str(p.relative_to(root.parent)))]
    assert not found, f"stages refuse with stages.contract.StageError (one line), not: {found}"
    assert bare_raises("def run(ctx):\n    if ctx:\n        raise ValueError('x')\n") == ["<stage>:3 raise ValueError"]
    assert bare_raises("raise StageError('x')\n") == []


@pytest.mark.parametrize("name,stage", CASES)
def test_run_given_a_broken_config_refuses_with_stage_error_before_any_work(name, stage, tmp_path, monkeypatch):
    """A context built without submit's check (a test's, a hand-edited record's): run(ctx) refuses
    it in one line, as submit would, and writes no output."""
    from stages.contract import StageContext, StageError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # a stage that got past its check would reach for the network
    spec, config = composed(name, stage)
    module = importlib.import_module(spec.module)
    for what, bad in broken_copies(stage, config):
        run_dir = tmp_path / what
        ctx = StageContext(run_id="r", recipe=name, stage=stage, config=bad, run_dir=run_dir,
                           inputs={i.role: tmp_path / "absent" / i.role for i in spec.inputs})
        with pytest.raises(StageError) as e:
            module.run(ctx)
        assert "\n" not in str(e.value) and stage in str(e.value), (what, str(e.value))
        assert not (run_dir / "outputs").exists(), what


def test_a_stages_timed_phases_add_up_and_a_phase_inside_another_counts_for_itself(monkeypatch, tmp_path):
    """ctx.timed on a clock the test moves: a save inside the training loop is save time, not train."""
    from stages import contract

    now = [100.0]
    monkeypatch.setattr(contract.time, "monotonic", lambda: now[0])
    ctx = contract.StageContext(run_id="r", recipe="tiny", stage="sft", config={}, inputs={}, run_dir=tmp_path)
    with ctx.timed("load"):
        now[0] += 2
    with ctx.timed("train"):
        now[0] += 5
        with ctx.timed("save"):
            now[0] += 1.5
        now[0] += 5
        with pytest.raises(RuntimeError), ctx.timed("save"):   # a phase that raises still counts
            now[0] += 0.5
            raise RuntimeError
    assert ctx.phases == {"load": 2.0, "train": 10.0, "save": 2.0}
