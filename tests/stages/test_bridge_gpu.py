"""dev/bridge_gpu.sh on a host without CUDA, with the real Megatron-Bridge 0.3.1 + megatron-core 0.16.1
of .venv-bridge (dev/bridge_venv.sh): the tiny data stage, our megatron-backend layouts, the tiny
recipe's pretrain and sft with `backend: megatron` composed and checked as submit does, rendered by
launch.prepare, and the rendered bridge_train.py run by torchrun as run_stage runs it, until Bridge's
pretrain() / finetune() reach initialize_megatron's CUDA assertion. Exit status 3 says the CPU parts
passed and the GPU part was not run. Fails when the venv is absent: the test command builds it."""
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PY = ROOT / ".venv-bridge" / "bin" / "python"


def test_cpu_mode_builds_both_configs_through_our_launch_path_and_stops_at_bridges_cuda_check(tmp_path):
    if not PY.exists():
        pytest.fail(f"{PY} is missing: run dev/bridge_venv.sh (dev/test.sh does) to run dev/bridge_gpu.sh's CPU mode")
    work, out = tmp_path / "work", tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "BRIDGE_GPU_WORK": str(work), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHON", None)
    p = subprocess.run(["bash", str(ROOT / "dev" / "bridge_gpu.sh")], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]

    # The raw result file bench/record.py keeps, and the summary beside it.
    raw = list(out.glob("bridge_gpu-nogpu-*.md"))
    assert len(raw) == 1, sorted(out.iterdir())
    text = raw[0].read_text()
    assert text.startswith("# `") and "exit 3" in text and "GPU none" in text
    result = json.loads((out / "bridge_gpu.json").read_text())
    assert [(c["check"], c["ok"]) for c in result["checks"]] == [
        ("data", True), ("configs", True), ("pretrain render", True), ("sft render", True),
        ("pretrain cuda stop", True), ("sft cuda stop", True)]
    assert result["gpu"] is None and result["status"] == 3

    # What Bridge was handed is ours: the stage's recipe, our layouts, the run's checkpoint folder.
    for stage, entry in (("pretrain", "pretrain"), ("sft", "finetune")):
        run = work / stage
        script = (run / "megatron" / "bridge_train.py").read_text()
        assert "'bridge_gpu_recipe:tiny_config', {'hf_model': '%s'}" % (work / "init_model") in script
        assert f"megatron.bridge.training.{entry}:{entry}" in script
        o = yaml.safe_load((run / "megatron" / "bridge_overrides.yaml").read_text())
        assert o["checkpoint"]["save"] == o["checkpoint"]["load"] == str(run / "checkpoints" / "megatron")
        assert o["model"]["seq_length"] == 48
        log = (run / "torchrun.log").read_text()
        # Past runtime_config_update (our overrides applied to the recipe, ConfigContainer.validate()),
        # into setup(): the first thing there that needs a GPU.
        assert f"training/{entry}.py" in log and "in initialize_megatron" in log, log[-3000:]
        assert "AssertionError: Megatron requires CUDA." in log
    pre = yaml.safe_load((work / "pretrain" / "megatron" / "bridge_overrides.yaml").read_text())["dataset"]
    assert pre["mock"] is False and pre["blend_per_split"][0] == [[str(work / "blend" / "tiny" / "train_00000")], [1.0]]
    assert (work / "blend" / "tiny" / "train_00000.idx").is_file()
    sft = yaml.safe_load((work / "sft" / "megatron" / "bridge_overrides.yaml").read_text())["dataset"]
    assert sft["_target_"].endswith("FinetuningDatasetConfig") and sft["dataset_root"] == str(work / "sft_data")
