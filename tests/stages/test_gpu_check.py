"""dev/gpu_check.sh, the GPU smoke check, run end to end on this CPU at its tiny scale: every stage
runs through the stage code, the forward passes are observed on the device asked for, in float32,
and the losses fall. (On a GPU the same script checks cuda and bf16 autocast.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_gpu_check_runs_its_stages_on_the_device_asked_for(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_SCALE": "tiny",
           "GPU_CHECK_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"), "GPU_CHECK_TIMEOUT": "1200"}
    p = subprocess.run(["bash", str(ROOT / "dev" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                       timeout=1300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    for stage in ("pretrain", "sft", "rl"):
        assert checks[f"{stage} trains on cpu"]["detail"] == "train cpu float32 float32"
    for stage in ("pretrain", "sft"):
        assert f"{stage} loss fell" in checks
    assert [t["stage"] for t in report["table"]] == ["pretrain", "sft", "grpo"]
    assert (tmp_path / "out" / "gpu_check.txt").read_text().count("| cpu |") == 3
    # The rl stage ran its actors in this process and wrote a model the eval stage read.
    assert (tmp_path / "work" / "rl" / "outputs" / "model" / "model.safetensors").is_file()
    assert "eval_rl ran" in checks
