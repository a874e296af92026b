"""The failure classifier (lineage/failures.py) over what real ends leave: sacct records and logs
captured from the dev cluster's jobs (tests/slurm/test_failure_classes.py wrote
tests/fixtures/sacct/ends.json), and exceptions raised for real; and the retry budget's rules."""
import importlib
import json
from pathlib import Path

import pytest

from jobs.triage import facts_of
from lineage.failures import CLASSES, Facts, classify, error_names, gpu_boundary, retry_problem, spent
from runtime.errors import CorruptInput, UpstreamFailed
from runtime.image import ImageLacks
from stages.contract import Requeue, StageError

CAPTURED = json.loads((Path(__file__).parents[1] / "fixtures" / "sacct" / "ends.json").read_text())
#: What each captured job did, and the class that end must get.
DID = {"exit 3": "code_error", "batch shell SIGKILL": "out_of_memory", "srun task SIGKILL": "out_of_memory",
       "over its cgroup memory": "out_of_memory", "import error": "environment", "time limit": "time_limit",
       "scontrol requeue": "preempted"}


@pytest.mark.parametrize("end", CAPTURED, ids=[c["case"] for c in CAPTURED])
def test_a_captured_end_gets_its_class(end):
    assert classify(facts_of(end["sacct"], end["steps"], tuple(end["log"]))) == DID[end["case"]], end


def test_without_the_log_sacct_alone_still_tells_the_ends_it_recorded():
    got = {c["case"]: classify(facts_of(c["sacct"], c["steps"], ())) for c in CAPTURED}
    # A bare exit 1 is all sacct knows of the import error: the log is what names the missing library.
    assert got == {**DID, "import error": "code_error"}


def test_a_node_down_now_makes_a_failed_attempt_a_node_failure():
    exit3 = next(c for c in CAPTURED if c["case"] == "exit 3")
    assert classify(facts_of(exit3["sacct"], exit3["steps"], (), node_state="down*")) == "node_failure"
    assert classify(facts_of(exit3["sacct"], exit3["steps"], (), node_state="idle")) == "code_error"


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 (the exception is the test's subject)
        return e
    raise AssertionError("nothing raised")


class GateFailed(Exception):
    """The results gate's exception is classified by its name."""


def test_exceptions_raised_in_the_job_get_their_class():
    cases = {
        "environment": [raised(lambda: importlib.import_module("no_such_library_here")),
                        ImageLacks("image x lacks vllm")],
        "out_of_memory": [raised(lambda: bytearray(1 << 62)),
                          RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")],
        "config_refused": [StageError("sft.lr must be > 0")],
        "bad_input": [CorruptInput("input data is corrupt"), UpstreamFailed("upstream run x is FAILED")],
        "code_error": [raised(lambda: {}["missing"]), RuntimeError("failing on purpose")],
        "gate": [GateFailed("eval/exact_match 0.1 < 0.8")],
        "gpu_boundary": [AssertionError("Megatron requires CUDA."),
                         RuntimeError("No CUDA GPUs are available"),
                         RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU")],
    }
    for cls, errors in cases.items():
        for e in errors:
            assert classify(Facts(error=error_names(e), message=str(e))) == cls, (cls, e)
    assert classify(Facts(error=error_names(Requeue()), stop="time_limit")) == "time_limit"
    assert classify(Facts(error=error_names(Requeue()), stop="preempted")) == "preempted"


UPSTREAM = """
class ResourceInsufficientError(Exception):
    pass


def placement(kind, retries):
    for i in range(retries):
        try:
            raise ResourceInsufficientError(f"Not enough {kind} available. Requested 8 {kind}, but only 0 are available.")
        except ResourceInsufficientError as e:
            print(e)
    raise ResourceInsufficientError(f"Maximum number of retries reached ({retries}).")
"""


def test_a_programs_last_traceback_says_where_it_refused_to_go_on_without_a_gpu(tmp_path):
    """A real Python's output: a library under nemo_rl/ that prints its refusal, retries, then raises (as NeMo
    RL's placement groups do); the boundary is the last frame's file and line, with the GPU refusal it printed."""
    import subprocess
    import sys

    lib = tmp_path / "nemo_rl" / "distributed"
    lib.mkdir(parents=True)
    (lib / "virtual_cluster.py").write_text(UPSTREAM)
    line = UPSTREAM.splitlines().index('    raise ResourceInsufficientError(f"Maximum number of retries reached ({retries}).")') + 1

    def ends(kind: str) -> list[str]:
        p = subprocess.run([sys.executable, "-c", f"from nemo_rl.distributed import virtual_cluster as v; v.placement({kind!r}, 2)"],
                           cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
        assert p.returncode == 1
        return (p.stdout + p.stderr).splitlines()

    got = gpu_boundary(ends("GPUs"))
    assert got == {"file": "nemo_rl/distributed/virtual_cluster.py", "line": line,
                   "message": "Not enough GPUs available. Requested 8 GPUs, but only 0 are available.",
                   "error": "nemo_rl.distributed.virtual_cluster.ResourceInsufficientError: Maximum number of retries reached (2)."}
    assert classify(Facts(log_tail=tuple(ends("GPUs")))) == "gpu_boundary"
    # The same error for CPUs is no GPU boundary: a retry or a bigger allocation may cure it.
    assert gpu_boundary(ends("CPUs")) is None
    assert classify(Facts(log_tail=tuple(ends("CPUs")))) == "code_error"
    assert gpu_boundary(["Not enough GPUs available.", "done"]) is None   # a line without a traceback ends nothing
    assert retry_problem({"gpu_boundary": 1}).startswith("cannot retry gpu_boundary")


def test_an_exception_in_the_jobs_own_process_says_where_too():
    """Megatron's CUDA assert raised in the stage's process: the job's entry reads its own traceback the same way."""
    import traceback

    def initialize():
        assert False, "Megatron requires CUDA."

    e = raised(initialize)
    got = gpu_boundary("".join(traceback.format_exception(e)).splitlines())
    assert got["file"] == "lineage/test_failures.py" and got["message"] == "Megatron requires CUDA."
    assert got["line"] == initialize.__code__.co_firstlineno + 1


def test_torch_refusing_cuda_names_the_library_line_that_asked_for_it(tmp_path):
    """torch's own refusal (here its CPU build's, as in the CPU twins) ends the traceback inside torch: the
    boundary is the last frame outside it, the upstream library's call (as Bridge's model_provider.py's
    torch.cuda.set_device), read from the program's output."""
    import subprocess
    import sys

    lib = tmp_path / "megatron" / "bridge"
    lib.mkdir(parents=True)
    (lib / "provider.py").write_text("import torch\n\n\ndef provide():\n    torch.cuda.set_device(0)\n")
    p = subprocess.run([sys.executable, "-c", "from megatron.bridge import provider; provider.provide()"],
                       cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    assert p.returncode == 1 and "torch/cuda/__init__.py" in p.stderr
    got = gpu_boundary(p.stderr.splitlines())
    assert got is not None, p.stderr[-2000:]
    assert (got["file"], got["line"]) == ("megatron/bridge/provider.py", 5)
    assert classify(Facts(log_tail=tuple(p.stderr.splitlines()))) == "gpu_boundary"


def test_a_refusal_in_a_process_group_read_through_torchs_rank_prefix(tmp_path):
    """Inside a torch.distributed process group (NeMo RL's Megatron -> HF converter opens a gloo one:
    "Export performs on CPU") torch prints an uncaught exception's traceback with every line prefixed
    `[rank0]: `; the refusal is read through it, as megatron-core's CUDA RNG seed asks torch for CUDA."""
    import subprocess
    import sys

    lib = tmp_path / "megatron" / "core"
    lib.mkdir(parents=True)
    (lib / "random.py").write_text("import torch\n\n\ndef seed():\n    torch.cuda.get_rng_state()\n")
    code = ("import torch.distributed as d\nd.init_process_group('gloo', init_method='tcp://127.0.0.1:29537', rank=0, "
            "world_size=1)\nfrom megatron.core import random\nrandom.seed()\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert p.returncode == 1 and "[rank0]: Traceback (most recent call last)" in p.stderr, p.stderr[-2000:]
    got = gpu_boundary(p.stderr.splitlines())
    assert got is not None, p.stderr[-2000:]
    assert (got["file"], got["line"]) == ("megatron/core/random.py", 5)
    assert classify(Facts(log_tail=tuple(p.stderr.splitlines()))) == "gpu_boundary"


#: An eval engine's output (stages/eval.py _engine_process) in the nemo-rl image's vLLM twin on this machine
#: (dev/twin_venv.sh nemo-rl-vllm: vLLM 0.11.2's CUDA wheel, no GPU), captured; {root} is the checkout.
VLLM_NO_GPU = (Path(__file__).parents[1] / "fixtures" / "vllm" / "engine_without_gpu.log").read_text().splitlines()


def test_vllm_finding_no_platform_is_its_gpu_boundary():
    """vLLM 0.11.2 with no GPU detects no platform (UnspecifiedPlatform, device type ""), and building LLM()'s
    DeviceConfig refuses the empty device string in vllm/config/device.py, before any CUDA call: the boundary
    is that line. The same words raised from any other file say nothing of GPUs."""
    got = gpu_boundary(VLLM_NO_GPU)
    assert got == {"file": "vllm/config/device.py", "line": 75,
                   "message": "vLLM found no platform (no GPU): Device string must not be empty",
                   "error": "RuntimeError: Device string must not be empty"}, got
    assert classify(Facts(log_tail=tuple(VLLM_NO_GPU))) == "gpu_boundary"
    elsewhere = [line.replace("vllm/config/device.py", "vllm/config/model.py") for line in VLLM_NO_GPU]
    assert gpu_boundary(elsewhere) is None
    assert classify(Facts(log_tail=tuple(elsewhere))) == "code_error"

    def infer():   # vLLM's own words when asked for device="auto" on no platform: they say it anywhere
        raise RuntimeError("Failed to infer device type, please set the environment variable `VLLM_LOGGING_LEVEL=DEBUG`")

    e = raised(infer)
    assert classify(Facts(error=error_names(e), message=str(e))) == "gpu_boundary"


def test_a_retry_budget_takes_only_transient_classes_and_counts():
    assert retry_problem({"preempted": 10, "node_failure": 2, "time_limit": 0}) is None
    assert "unknown failure class 'preemted' (did you mean preempted?" in retry_problem({"preemted": 1})
    assert "cannot retry code_error" in retry_problem({"code_error": 1})
    assert "whole number" in retry_problem({"time_limit": -1}) and "whole number" in retry_problem({"time_limit": True})
    assert "mapping" in retry_problem(["preempted"])
    for cls in CLASSES:
        assert "\n" not in (retry_problem({cls: 1}) or "")
    attempts = [{"failure_class": "time_limit"}, {"failure_class": "preempted"}, {"failure_class": "time_limit"}]
    assert spent(attempts[:2], "time_limit", {"time_limit": 1}) is None
    assert spent(attempts, "time_limit", {"time_limit": 1}) == \
        "time_limit: 2 attempts ended so, the retry budget allows 1 requeue (retries.time_limit)"
    assert spent(attempts, "preempted", {"time_limit": 1}) is None   # the default budget for the others
