"""eval in the nemo-rl image: its default Python (the twin) has no vLLM, the vLLM worker's Python has.
The job's own check asks for vLLM in the Python that runs the engines, and an engine process started by
that Python imports that Python's packages (not the job's sys.path). With the twin of the vLLM worker's
Python (.venv-nemo-rl-vllm: vLLM 0.11.2's CUDA build), nano3's eval runs through the job's entry up to
vLLM's own refusal to go on without a GPU, and its record says where."""
from __future__ import annotations

import json
import sys

import pytest

from twin import NEMO_RL_TWIN, NEMO_RL_VLLM_TWIN, ROOT, TOY, require, run

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
    assert missing_in(str(NEMO_RL_TWIN.py), why) == ["vllm"]          # the image's default venv, as its twin
    if NEMO_RL_VLLM_TWIN.py.exists():                                  # and its vLLM worker's venv, as its twin
        assert missing_in(str(NEMO_RL_VLLM_TWIN.py), why) == []
        check_image(spec(str(NEMO_RL_VLLM_TWIN.py)))
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


BOUNDARY = "vllm/config/device.py"


def refusal_line() -> int:
    """The line of the vLLM twin's config/device.py where DeviceConfig turns the platform's device type into
    a torch.device (torch refuses the empty one of UnspecifiedPlatform), read from the source."""
    (source,) = NEMO_RL_VLLM_TWIN.venv.glob(f"lib/python3.*/site-packages/{BOUNDARY}")
    lines = source.read_text().splitlines()
    (at,) = [i + 1 for i, line in enumerate(lines) if line.strip() == "self.device = torch.device(self.device_type)"]
    return at


@pytest.mark.slow
def test_nano3_eval_through_the_job_entry_stops_at_vllms_gpu_boundary(tmp_path):
    """The job in the nemo-rl twin's Python, its engines (data_parallel_size 2, as nano3 runs) in the vLLM
    twin's: the tokenizer and prompts done, each engine imports vLLM and builds LLM(...) up to its device
    check, which finds no platform. The run is FAILED, class gpu_boundary at vLLM's line, one attempt."""
    from helpers import run_jobs
    from lineage import Store

    NEMO_RL_VLLM_TWIN.require()
    r = run(["-c", TOY, str(tmp_path / "model")])
    assert r.returncode == 0, r.stderr[-2000:]
    (tmp_path / "evalset").mkdir()
    (tmp_path / "evalset" / "test.jsonl").write_text("".join(f'{{"prompt": "{a}+{a}=?", "answer": "{2 * a}"}}\n' for a in range(1, 5)))
    root = tmp_path / "store"
    for src, kind in (("model", "model"), ("evalset", "eval-data")):
        added = run_jobs(root, "add", str(tmp_path / src), "--kind", kind, "--name", f"toy/{src}")
        assert added.code == 0, added.err
    # W&B off: its offline service, slow to start on 2 cores, is no part of the path to vLLM.
    run_id, r = NEMO_RL_TWIN.execute(root, "nano3", "eval", ["model=toy/model:latest", "data=toy/evalset:latest"],
                                     [f"eval.vllm_python={NEMO_RL_VLLM_TWIN.py}", "tracking.wandb=disabled"], timeout=300)
    assert r.returncode != 0
    view = Store(root).run(run_id)
    (attempt,) = view.attempts
    assert view.state == "FAILED" and attempt["failure_class"] == "gpu_boundary", (attempt, r.stderr[-3000:])
    assert (attempt["boundary"]["file"], attempt["boundary"]["line"]) == (BOUNDARY, refusal_line()), attempt
    assert attempt["boundary"]["message"] == "vLLM found no platform (no GPU): Device string must not be empty"
    assert "stage" in attempt["phases"]
    assert attempt["python_executable"].startswith(str(NEMO_RL_TWIN.venv))   # the job ran in the default venv's twin
    # Both engines got there, each in the vLLM twin's Python.
    assert r.stderr.count("RuntimeError: Device string must not be empty") == 2, r.stderr[-4000:]
    assert r.stderr.count(f"{NEMO_RL_VLLM_TWIN.venv}/lib/") >= 2
