"""stages/backends/upstream_run.py: an upstream program run from a stage, its output streamed, its GPU
refusal read from what it printed, under real torchrun as the megatron backend launches its training."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stages.backends import upstream_run
from stages.contract import GpuBoundary

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def library(tmp_path: Path, body: str) -> Path:
    """A training script calling megatron/core/init.py's initialize() (`body`), as Bridge's pretrain calls megatron-core's."""
    (tmp_path / "megatron" / "core").mkdir(parents=True)
    for pkg in ("megatron", "megatron/core"):
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "megatron" / "core" / "init.py").write_text(f"def initialize():\n    {body}\n")
    script = tmp_path / "train.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom megatron.core.init import initialize\n"
                      "print('worker up', flush=True)\ninitialize()\n")
    return script


def test_a_refusal_in_torchruns_worker_is_the_boundary_not_torchruns_own_traceback(tmp_path, capfd):
    script = library(tmp_path, 'assert False, "Megatron requires CUDA."')
    seen = []
    with pytest.raises(GpuBoundary) as e:
        upstream_run.run([TORCHRUN, "--nproc-per-node=1", str(script)], while_running=seen.append, every_s=0.05)
    assert e.value.where["file"] == "megatron/core/init.py" and e.value.where["line"] == 2, e.value.where
    assert e.value.where["message"] == "Megatron requires CUDA."
    err = capfd.readouterr().err
    assert "worker up" in err and "ChildFailedError" in err   # the whole output went to the job's log, torchrun's too
    assert seen and all(isinstance(p, subprocess.Popen) for p in seen)   # watched while it ran (torchrun takes seconds)


def test_any_other_failure_stays_a_failed_program(tmp_path):
    script = library(tmp_path, 'raise ValueError("bad shard")')
    with pytest.raises(subprocess.CalledProcessError):
        upstream_run.run([sys.executable, str(script)])
    upstream_run.run([sys.executable, "-c", "print('fine')"])   # a clean exit raises nothing
