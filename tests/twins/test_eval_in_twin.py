"""eval in the nemo-rl image: its default Python (the twin) has no vLLM, the vLLM worker's Python has.
The job's own check asks for vLLM in the Python that runs the engines, and an engine process started by
that Python imports that Python's packages (not the job's sys.path)."""
from __future__ import annotations

import json
import sys

import pytest

from twin import ROOT, require, run

require()
OTHER = str(ROOT / ".venv" / "bin" / "python")     # stands for the image's vLLM venv: it has vLLM and torch


def spec(vllm_python: str | None) -> dict:
    from jobs import recipes

    config = recipes.compose(recipes.load("nano3"), "eval", [f"eval.vllm_python={vllm_python or 'null'}"])
    return {"module": "stages.eval", "stage": "eval", "config": config}


def test_the_vllm_python_check_names_the_python_that_lacks_vllm(tmp_path):
    from runtime.image import ImageLacks, check_image, missing_in, needs, needs_elsewhere

    s = spec(str(tmp_path / "python-VllmGenerationWorker"))
    assert "vllm" not in needs(s)
    (python, why), = needs_elsewhere(s).items()
    assert missing_in(python, why) == ["vllm"]
    assert missing_in(OTHER, why) == []
    assert missing_in(sys.executable, why) == []
    check_image(spec(OTHER))                      # this Python has what eval's own process imports
    with pytest.raises(ImageLacks) as err:
        check_image(s)
    assert str(err.value) == (f"{python} lacks vllm (or does not run), which stage eval imports there "
                              f"(eval.vllm_python={python})")


def test_an_engine_started_by_the_vllm_python_imports_its_own_packages_not_the_jobs(tmp_path):
    """The job runs in the twin (no torch, no vLLM); the engine's Python has both. The engine gets as far as
    vLLM's own refusal of a model folder that does not exist: its imports came from its own Python."""
    job = {"model": str(tmp_path / "no-model"), "engine": {"seed": 0}, "sampling": {"n": 1, "max_tokens": 2},
           "greedy": None, "prompts": [[1, 2]], "seeds": [1], "out": str(tmp_path / "out.json"), "gpus": "",
           "threads": 1}
    code = ("import json, sys\nfrom pathlib import Path\nfrom stages import eval as ev\n"
            "cmd, env = ev.engine_command({'vllm_python': sys.argv[1]}, Path(sys.argv[2]))\n"
            "import subprocess\nsys.exit(subprocess.run(cmd, env=env).returncode)")
    (tmp_path / "job.json").write_text(json.dumps(job))
    r = run(["-c", code, OTHER, str(tmp_path / "job.json")], timeout=600)
    assert r.returncode == 1
    assert "No module named" not in r.stderr, r.stderr[-2000:]
    assert "no-model" in r.stderr.splitlines()[-1], r.stderr[-2000:]
