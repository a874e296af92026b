"""What a stage needs from its image, and the one-line failure when the image lacks it.

`needs` says which Python modules a stage imports from the image (torch, transformers, ray, vllm...)
for its config, in the job's own interpreter; `needs_elsewhere` what it imports in another Python of
the image (eval's vLLM engines under `vllm_python`). `check_image`, the first thing runtime.entry.execute
does, fails the run in one line naming the ones either interpreter lacks; the launcher asks the first
question of a Charliecloud image at submit (jobs/executors/slurm.py), before a queue wait.
Imports nothing beyond the standard library.
"""
import os

from runtime.errors import JobFailed

BUNDLE_ENV = "JOBS_RUNTIME_BUNDLE"
IMAGE_ENV = "JOBS_IMAGE"
NODE_ADDRS_ENV = "JOBS_NODE_ADDRS"    # node=address,... from scontrol on the host, for a job in an image

#: The Python modules each backend imports from the image.
BACKENDS = {
    "torch": ("torch", "transformers", "tokenizers", "safetensors", "numpy"),
    "hf": ("torch", "transformers", "tokenizers", "numpy"),
    "vllm": ("torch", "transformers", "vllm"),
    "megatron": ("torch", "megatron.core", "megatron.bridge"),
    "nemo_rl": ("nemo_rl",),
}
#: Stages whose module imports its libraries whatever the backend (no `backend:` key).
MODULES = {
    "stages.data": ("tokenizers", "transformers"),
    "stages.prep": ("transformers", "numpy"),
}
#: Stages that train with the torch backend unless their section names another.
TRAINERS = ("stages.pretrain", "stages.sft", "stages.rm", "stages.rl", "stages.eval", "stages.export")
#: Stages that attach the trackers of `tracking:` (stages/ml/tracking.py session).
TRACKED = ("stages.pretrain", "stages.sft", "stages.rm", "stages.rl", "stages.eval")


#: A stage section's key naming the image's Python that runs its vLLM engines (eval.vllm_python: the
#: nemo-rl image's default venv has no vLLM), and what that Python, not the job's, must have.
ELSEWHERE_KEY = "vllm_python"
ELSEWHERE = ("vllm",)


class ImageLacks(JobFailed):
    """The image has no module the stage imports: the run fails before it starts, in one line."""


def needs(stage: dict) -> dict[str, str]:
    """{python module: why} for a run spec or a stage plan (module, stage, config, ray)."""
    module, name = stage["module"], stage["stage"]
    config = stage.get("config") or {}
    section = config.get(name) if isinstance(config.get(name), dict) else {}
    why: dict[str, str] = {}

    def add(mods, reason: str) -> None:
        for m in mods:
            why.setdefault(m, reason)

    add(MODULES.get(module, ()), "")
    elsewhere = set(ELSEWHERE) if section.get(ELSEWHERE_KEY) else set()   # vLLM in its own Python: not this one
    if module in TRAINERS or "backend" in section:
        backend = section.get("backend", "torch")
        add([m for m in BACKENDS.get(backend, ()) if m not in elsewhere], f"{name}.backend={backend}")
    generation = section.get("generation") if isinstance(section.get("generation"), dict) else {}
    if generation.get("backend") in BACKENDS:
        add(BACKENDS[generation["backend"]], f"{name}.generation.backend={generation['backend']}")
    if stage.get("ray"):
        add(("ray",), f"stage {name} runs on Ray")
    tracking = config.get("tracking") if isinstance(config.get("tracking"), dict) else {}
    if module in TRACKED and tracking:
        if tracking.get("wandb", "offline") != "disabled":
            add(("wandb",), f"tracking.wandb={tracking.get('wandb', 'offline')}")
        if tracking.get("tensorboard"):
            add(("tensorboard",), "tracking.tensorboard=true")
    return why


def needs_elsewhere(stage: dict) -> dict[str, dict[str, str]]:
    """{another Python of the image: {module: why}}: what the stage runs in an interpreter not the job's."""
    name, config = stage["stage"], stage.get("config") or {}
    section = config.get(name) if isinstance(config.get(name), dict) else {}
    python = section.get(ELSEWHERE_KEY)
    return {python: {m: f"{name}.{ELSEWHERE_KEY}={python}" for m in ELSEWHERE}} if python else {}


#: `python -c FIND MODULE...` prints (JSON) the modules that Python cannot find, importing none of them.
FIND = ("import importlib.util as u, json, sys\ndef has(m):\n    try:\n        return u.find_spec(m) is not None\n"
        "    except (ImportError, ValueError):\n        return False\nprint(json.dumps([m for m in sys.argv[1:] if not has(m)]))")


def missing_in(python: str, modules) -> list[str]:
    """The modules `python` (another interpreter) cannot find; all of them when it cannot run."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        p = subprocess.run([python, "-c", FIND, *modules], capture_output=True, text=True, timeout=120, env=env,
                           stdin=subprocess.DEVNULL)
        return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else list(modules)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return list(modules)


def missing(modules) -> list[str]:
    """The modules this interpreter cannot find (without importing them)."""
    import importlib.util

    gone = []
    for m in modules:
        try:
            if importlib.util.find_spec(m) is None:
                gone.append(m)
        except (ImportError, ValueError):   # a parent package that is absent or broken
            gone.append(m)
    return gone


def lacks_message(gone: list[str], why: dict[str, str], image: str | None, stage: str) -> str:
    """One line: which modules, in which image, and what in the config needs them."""
    where = f"image {image}" if image else "this Python environment"
    reasons = "; ".join(dict.fromkeys(why[m] for m in gone if why.get(m)))
    return f"{where} lacks {', '.join(gone)}, which stage {stage} imports" + (f" ({reasons})" if reasons else "")


def lacks_elsewhere_message(gone: list[str], why: dict[str, str], python: str, image: str | None, stage: str) -> str:
    """One line: which modules another Python of the image lacks, and what in the config runs it."""
    where = f"image {image}'s {python}" if image else python
    return (f"{where} lacks {', '.join(gone)} (or does not run), which stage {stage} imports there "
            f"({'; '.join(dict.fromkeys(why.values()))})")


def check_image(stage: dict) -> None:
    """Raise ImageLacks when this interpreter lacks a module the stage needs."""
    why = needs(stage)
    gone = missing(why)
    if gone:
        raise ImageLacks(lacks_message(gone, why, os.environ.get(IMAGE_ENV), stage["stage"]))
    for python, why in needs_elsewhere(stage).items():
        gone = missing_in(python, why)
        if gone:
            raise ImageLacks(lacks_elsewhere_message(gone, why, python, os.environ.get(IMAGE_ENV), stage["stage"]))


def ran_in() -> dict:
    """What the attempt records about where it ran: the interpreter, the CPU kernels torch runs on
    this node, and in a container the image and the bundle (as the job's environment names them)."""
    import sys

    from runtime.cpu import cpu_kernels

    facts = {"python_executable": sys.executable}
    kernels = cpu_kernels()   # reads /proc/cpuinfo: once
    if kernels:
        facts["cpu_kernels"] = kernels
    if os.environ.get(IMAGE_ENV):
        facts["image"] = os.environ[IMAGE_ENV]
    if os.environ.get(BUNDLE_ENV):
        facts["runtime_bundle"] = "sha256:" + os.path.basename(os.environ[BUNDLE_ENV].rstrip("/"))
    return facts
