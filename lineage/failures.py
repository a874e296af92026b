"""Why an attempt failed, as one class, and how many times a run may be requeued for each.

Every failed attempt gets one class, decided here and nowhere else (`classify`), from what is
known where its end is noticed: inside the job, the exception the stage or the entry raised (and,
for a requeue on Slurm's USR2, whether the time limit was near); from outside, what Slurm's
accounting kept (sacct State, ExitCode, DerivedExitCode), the state of the node it ran on, the
signal that ended it, and the last lines of its log.

    preempted      Slurm took the allocation back (preemption, `scontrol requeue`)    transient
    node_failure   the node died or was set down under the job                          transient
    time_limit     the job reached its time limit                                       transient
    out_of_memory  the process ran out of memory (MemoryError, Slurm's OUT_OF_MEMORY,
                   or a SIGKILL that nothing else explains: the kernel's OOM killer)
    environment    the image or Python environment lacks a library; an import failed; Ray did not start
    config_refused the stage refused its config or state (StageError)
    bad_input      an input is corrupt, or its upstream run did not succeed
    code_error     anything else: an exception in the code, a non-zero exit
    gate           a results gate refused the outputs (GateFailed)
    gpu_boundary   an upstream entry point ran up to its first GPU-only request on a machine with no
                   GPU and was refused there (NeMo RL's "Not enough GPUs available", Megatron's
                   "Megatron requires CUDA", torch's "no CUDA GPUs"): all before it ran; the attempt
                   keeps the refusing file and line (`boundary`)

A transient class is requeued within the run's retry budget (`retries`, from the recipe stage's
resources and the profile, recorded in the run spec); the others never are: a retry would fail the
same way.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

CLASSES = ("preempted", "node_failure", "time_limit", "out_of_memory", "environment", "config_refused",
           "bad_input", "code_error", "gate", "gpu_boundary")
#: The classes a requeue can cure; only these take a retry budget.
TRANSIENT = ("preempted", "node_failure", "time_limit")
#: Requeues allowed per class when neither the recipe nor the profile says.
DEFAULT_RETRIES = {"preempted": 10, "node_failure": 2, "time_limit": 3}
#: The most requeues of one class a budget may allow: beyond it a value is a typo.
MAX_RETRIES = 1000

# Exception type names (the type's or a base's) -> class, first match wins.
_BY_ERROR = (
    ({"GpuBoundary"}, "gpu_boundary"),
    ({"GateFailed"}, "gate"),
    ({"MemoryError", "OutOfMemoryError"}, "out_of_memory"),
    ({"ImageLacks", "ImportError", "ModuleNotFoundError", "RayClusterError"}, "environment"),
    ({"CorruptInput", "UpstreamFailed"}, "bad_input"),
    ({"StageError"}, "config_refused"),
)
# sacct states that name the cause themselves.
_BY_STATE = {"NODE_FAIL": "node_failure", "BOOT_FAIL": "node_failure", "OUT_OF_MEMORY": "out_of_memory",
             "TIMEOUT": "time_limit", "DEADLINE": "time_limit", "PREEMPTED": "preempted",
             "REQUEUED": "preempted"}
#: What an upstream library says when it refuses to go on without a GPU: NeMo RL's placement groups
#: (nemo_rl/distributed/virtual_cluster.py), Megatron-Bridge's and megatron-core's CUDA asserts, torch's
#: lazy CUDA init with no device or no driver, and torch's CPU build (the CPU twins' torch) refusing the
#: same calls. (NeMo RL's ResourceInsufficientError alone says nothing of GPUs: it is raised for CPUs
#: too, and after its retries with a message of its own.)
GPU_REFUSAL = re.compile(r"Not enough GPUs available|Megatron requires CUDA|[Nn]o CUDA GPUs are available|"
                         r"Found no NVIDIA driver|Torch not compiled with CUDA enabled|"
                         r"module 'torch\._C' has no attribute '_cuda_|"
                         r"Failed to infer device type")   # vLLM's DeviceConfig(device="auto") on no platform
#: Refusals whose words say nothing of GPUs anywhere else, recognised by the file that raised them (the
#: traceback's last frame, as _library_path writes it): vLLM 0.11's engine builds its DeviceConfig from
#: the platform it detected, and with no GPU (and a CUDA build of vLLM: no CPU, ROCm, TPU or XPU one) that
#: is UnspecifiedPlatform, whose device type is "": torch.device("") refuses it in vllm/config/device.py,
#: before any CUDA call. {file: (its refusal, what it means, said before the refusal in the boundary's message)}
GPU_REFUSAL_AT = {"vllm/config/device.py": (re.compile(r"Device string must not be empty"),
                                            "vLLM found no platform (no GPU)")}
# What slurmstepd, the kernel or Python leave as a log's last words.
_BY_LOG = (
    (re.compile(r"DUE TO NODE FAILURE"), "node_failure"),
    (re.compile(r"DUE TO TIME LIMIT"), "time_limit"),
    (re.compile(r"DUE TO PREEMPTION|DUE TO JOB REQUEUE"), "preempted"),
    # srun's word for a task ended by SIGKILL: nothing of Slurm's own sent it (its kills carry a state)
    (re.compile(r"task \d+: Killed$"), "out_of_memory"),
    (re.compile(r"exceeded (job )?memory limit|oom[-_ ]kill|Out of memory|out of memory|"
                r"[Cc]an(no|')t allocate memory", re.I), "out_of_memory"),
)
#: A traceback's last line: `package.module.Name: message` (or the bare name).
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Failed|Lacks|Input))(?::|$)")
#: Node states (sinfo %T, scontrol State) of a node that is gone; a trailing "*" is "not responding".
_NODE_GONE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER")


@dataclass(frozen=True)
class Facts:
    """What is known of one failed attempt; every field may be missing."""

    error: tuple[str, ...] = ()        # the exception's type name and its bases' (error_names)
    message: str = ""                  # the exception's message
    stop: str | None = None            # a requeue on USR2: "time_limit" or "preempted" (runtime/attempts.py)
    state: str | None = None           # sacct State, e.g. "TIMEOUT", "NODE_FAIL", "CANCELLED by 0"
    exit_code: str | None = None       # sacct ExitCode, "rc:signal"
    derived_exit_code: str | None = None
    node_state: str | None = None      # the attempt's node as Slurm sees it now (sinfo %T / scontrol State)
    signal: int | None = None          # the signal that ended the process, when known
    log_tail: tuple[str, ...] = ()     # the last lines of the job's stderr


def error_names(error: BaseException) -> tuple[str, ...]:
    """The names of the exception's type and its bases, most derived first."""
    return tuple(t.__name__ for t in type(error).__mro__)


def _by_names(names) -> str | None:
    names = set(names)
    for wanted, cls in _BY_ERROR:
        if names & wanted:
            return cls
    return None


def _signal(facts: Facts) -> int | None:
    """The signal from the facts, or from an exit code's "rc:signal" (or rc 128+n, a shell's way)."""
    if facts.signal:
        return facts.signal
    for code in (facts.exit_code, facts.derived_exit_code):
        rc, _, sig = (code or "").partition(":")
        if sig.isdigit() and int(sig):
            return int(sig)
        if rc.isdigit() and 128 < int(rc) < 160:
            return int(rc) - 128
    return None


def classify(facts: Facts) -> str:
    """The one class of a failed attempt (one of CLASSES)."""
    if facts.error:
        if "Requeue" in facts.error:
            return facts.stop if facts.stop in ("time_limit", "preempted") else "preempted"
        found = _by_names(facts.error)
        if found:
            return found
        if GPU_REFUSAL.search(facts.message):
            return "gpu_boundary"   # e.g. torch's RuntimeError "No CUDA GPUs are available" in the stage itself
        if any(p.search(facts.message) for p, cls in _BY_LOG if cls == "out_of_memory"):
            return "out_of_memory"   # e.g. torch's "DefaultCPUAllocator: can't allocate memory"
        return "code_error"
    state = (facts.state or "").split()[0] if (facts.state or "").strip() else ""
    node = (facts.node_state or "").upper()
    if state in ("NODE_FAIL", "BOOT_FAIL") or any(w in node for w in _NODE_GONE) or node.endswith("*"):
        return "node_failure"
    if state in _BY_STATE:
        return _BY_STATE[state]
    if gpu_boundary(facts.log_tail):
        return "gpu_boundary"
    for line in reversed(facts.log_tail):
        for pattern, cls in _BY_LOG:
            if pattern.search(line):
                return cls
        m = _EXC_LINE.match(line.strip())
        if m:
            return _by_names({m.group(1)}) or "code_error"
    if _signal(facts) == 9:
        return "out_of_memory"   # Slurm's own kills carry their state; an unexplained SIGKILL is the OOM killer's
    return "code_error"


#: A traceback's frame line: `  File "PATH", line N, in NAME`.
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')
#: What torch prefixes each line of an uncaught exception with in a process that joined a process group.
_RANK = re.compile(r"^\[rank\d+\]: ")


def gpu_boundary(lines) -> dict | None:
    """Where an upstream library refused to go on without a GPU, from its output's last lines: the last
    traceback that ends in a GPU refusal (a launcher's own traceback may follow it: torchrun's
    ChildFailedError after its worker's), else the last traceback when the library printed its refusal
    before it gave up (as NeMo RL does after its retries). Its last frame ({"file", "line"}: the file
    from the library's top package on, e.g. nemo_rl/distributed/virtual_cluster.py; when torch itself
    refuses, the last frame outside torch, the library's line that asked torch for CUDA, e.g.
    megatron/bridge/models/model_provider.py), the refusal (`message`) and the exception line
    (`error`); None when the output ends in no such refusal. A traceback torch printed with each line
    prefixed `[rankN]: ` (a process in a process group: NeMo RL's Megatron converter's gloo one) reads
    as the plain one."""
    lines = [_RANK.sub("", str(line).rstrip("\n")) for line in lines]
    tracebacks = [_traceback(lines, i) for i, line in enumerate(lines)
                  if line.startswith("Traceback (most recent call last)")]
    tracebacks = [t for t in tracebacks if t]
    if not tracebacks:
        return None
    refused = [t for t in tracebacks if GPU_REFUSAL.search(t[2]) or _refused_at(t[1], t[2])]
    if refused:
        _, frames, error = refused[-1]
        message = error.split(": ", 1)[-1] if _EXC_LINE.match(error) and ": " in error else error
        if not GPU_REFUSAL.search(error):
            message = f"{_refused_at(frames, error)}: {message}"
    else:
        start, frames, error = tracebacks[-1]
        said = [line.strip() for line in lines[:start] if GPU_REFUSAL.search(line)]
        if not said or not _EXC_LINE.match(error):
            return None
        message = said[-1]
    where = [(_library_path(path), int(lineno)) for path, lineno in frames]
    path, lineno = next((f for f in reversed(where) if not f[0].startswith("torch/")), where[-1])
    return {"file": path, "line": lineno, "message": message, "error": error}


def _refused_at(frames: list, error: str) -> str | None:
    """What the refusal means when the traceback's last frame is a file of GPU_REFUSAL_AT and its exception
    that file's refusal; else None."""
    words, means = GPU_REFUSAL_AT.get(_library_path(frames[-1][0]) if frames else "", (None, None))
    return means if words and words.search(error) else None


def _traceback(lines: list[str], start: int) -> tuple[int, list, str] | None:
    """The traceback starting at lines[start]: (start, its frames as (file, line), its exception line)."""
    frames = []
    for line in lines[start + 1:]:
        m = _FRAME.match(line)
        if m:
            frames.append(m.groups())
        elif frames and line and not line.startswith((" ", "\t")):
            return start, frames, line.strip()
    return None


def _library_path(path: str) -> str:
    """A traceback's file from its library's top package on."""
    parts = path.split("/")
    for marker in ("site-packages", "dist-packages"):   # an installed library: from its package on
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    # a checkout (NeMo RL's runs from /opt/nemo-rl, Bridge's src/ and Megatron-LM are on the path):
    # from the library's top package on
    tops = [i for i, p in enumerate(parts) if p in ("nemo_rl", "megatron", "torch")]
    return "/".join(parts[tops[0]:] if tops else parts[-2:])


# ---- the retry budget -----------------------------------------------------------------------------
def retry_problem(value) -> str | None:
    """What is wrong with a `retries:` mapping (class -> requeues), in one line; None when it is fine."""
    if not isinstance(value, dict):
        return f"must be a mapping of failure class to a count, e.g. {{preempted: 10}} (got {value!r:.60})"
    for cls, n in value.items():
        if cls not in CLASSES:
            near = difflib.get_close_matches(str(cls), TRANSIENT, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}? " if near else ""
            return f"has unknown failure class {cls!r} ({hint}retried: {', '.join(TRANSIENT)})"
        if cls not in TRANSIENT:
            return f"cannot retry {cls}: a retry would fail the same way (retried: {', '.join(TRANSIENT)})"
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_RETRIES:
            return f"{cls} must be a whole number of requeues in [0, {MAX_RETRIES}] (got {n!r:.60})"
    return None


def budget(*layers: dict | None) -> dict[str, int]:
    """The budget in force: the defaults, then each layer (the recipe's, then the profile's) on top."""
    out = dict(DEFAULT_RETRIES)
    for layer in layers:
        out.update(layer or {})
    return out


def used(attempts: list[dict], cls: str) -> int:
    """How many of the run's attempts ended in `cls`."""
    return sum(1 for a in attempts if a.get("failure_class") == cls)


def spent(attempts: list[dict], cls: str, retries: dict | None) -> str | None:
    """None while `cls` may be requeued once more (its attempts so far, the one ending now included,
    are within the budget); else the run's FAILED reason, naming the class and the count."""
    if cls not in TRANSIENT:
        return None
    allowed = budget(retries).get(cls, 0)
    n = used(attempts, cls)
    if n <= allowed:
        return None
    return (f"{cls}: {n} attempt{'s' if n != 1 else ''} ended so, the retry budget allows "
            f"{allowed} requeue{'s' if allowed != 1 else ''} (retries.{cls})")
