"""Print the image's Python packages: the libraries the stages import and everything they need,
each at the version installed in this environment (the project's .venv), one `name==version` a line.

Pinning the whole closure to the venv's versions lets a stage's outputs in the image match, bit for
bit, the same stage run outside it. Our launcher's own dependencies (submitit, hydra-core, omegaconf,
cloudpickle) and this project are left out, as NVIDIA's images leave them out: a job brings them.
"""
import re
import sys
from importlib.metadata import PackageNotFoundError, distribution

from packaging.markers import default_environment
from packaging.requirements import Requirement

# What the stages import (stages/, runtime/) and the [cpu] extra of pyproject.toml; datasets for the
# prep stages, as NVIDIA's NeMo image carries it.
LIBRARIES = ["torch", "transformers", "tokenizers", "safetensors", "numpy", "ray", "wandb", "tensorboard",
             "datasets", "pyyaml"]
LAUNCHER_ONLY = {"submitit", "hydra-core", "omegaconf", "cloudpickle", "antlr4-python3-runtime", "jobs"}


def key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, str]:
    env, seen, todo = default_environment(), {}, list(roots)
    while todo:
        name = todo.pop()
        if key(name) in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            sys.exit(f"requirements.py: {name} is not installed in {sys.prefix}; run dev/setup.sh first")
        seen[key(name)] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(req.name)
    return seen


if __name__ == "__main__":
    pins = closure(LIBRARIES)
    bad = sorted(set(pins) & LAUNCHER_ONLY)
    if bad:
        sys.exit(f"requirements.py: the image would carry {', '.join(bad)}, which the job must bring itself")
    print("\n".join(f"{name}=={version}" for name, version in sorted(pins.items())))
