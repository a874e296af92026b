"""The rl stage's Megatron -> HF export (stages/backends/nemo_rl.py export) in the twin of the nemo-rl image's
Megatron policy worker venv (.venv-nemo-rl-mcore, the image's python-MegatronPolicyWorker): NeMo RL's own
converter (examples/converters/convert_megatron_to_hf.py) on a step of its checkpoint layout made by that
Python's own Megatron-Bridge (tests/twins/nemo_rl_megatron_step.py). It reads the step's config.yaml, builds
AutoBridge from the policy's HF folder, opens its gloo context ("Export performs on CPU") and then seeds
megatron-core's CUDA RNG tracker (model_parallel_cuda_manual_seed), which a machine without CUDA refuses:
the export ends there, recorded as the GPU boundary at megatron-core's line."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stages.contract import GpuBoundary
from twin import NEMO_RL_MCORE_TWIN as MCORE, ROOT, TOY

MCORE.require()
RANDOM = "megatron/core/tensor_parallel/random.py"


@pytest.fixture(scope="module")
def step(tmp_path_factory) -> Path:
    """A toy Llama's step_1 in NeMo RL's layout: config.yaml and policy/weights/iter_0000000."""
    work = tmp_path_factory.mktemp("mcore")
    for args in (["-c", TOY, str(work / "policy")],
                 [str(ROOT / "tests/twins/nemo_rl_megatron_step.py"), str(work / "policy"), str(work / "step_1")]):
        r = MCORE.run(args, timeout=600, env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode == 0, r.stderr[-3000:]
    return work / "step_1"


def refusal_line() -> int:
    """The line of megatron-core's CudaRNGStatesTracker.add that asks torch for the CUDA RNG state."""
    path = MCORE.checkout / "3rdparty/Megatron-LM-workspace/Megatron-LM" / RANDOM
    (call,) = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
               and ast.unparse(n.func) == "torch.cuda.get_rng_state" and "orig_rng_state" in
               path.read_text().splitlines()[n.lineno - 1]]
    return call.lineno


def test_the_megatron_export_runs_nemo_rls_converter_to_megatron_cores_cuda_rng_seed(step, tmp_path, monkeypatch, capfd):
    from stages.backends import nemo_rl

    out = tmp_path / "model"
    out.mkdir()          # as the stage's ctx.output_dir gives it: fresh and empty
    monkeypatch.setattr(nemo_rl, "MCORE_PYTHON", str(MCORE.py))
    for k, v in MCORE.image_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(GpuBoundary) as stop:
        nemo_rl.export(step, out, megatron=True, repo=MCORE.checkout)
    where = stop.value.where
    assert where["file"] == RANDOM and where["line"] == refusal_line(), where
    log = capfd.readouterr().err
    # Nothing failed before it: the converter read the step's config and built AutoBridge from the policy's
    # folder, in the gloo context, and was seeded there.
    # (torch prints it with each line prefixed [rank0]: inside that context)
    assert "in export_model_from_megatron\n[rank0]:     model_parallel_cuda_manual_seed(0)" in log, log[-3000:]
    assert "FileExistsError" not in log and log.count("Traceback (most recent call last)") == 1, log[-3000:]
    assert not out.exists()     # the converter stopped before writing
