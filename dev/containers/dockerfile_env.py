"""The environment an image built from a Dockerfile runs with: the `ENV` lines of its last stage and of
the stages it is built `FROM`, in order, each value expanded against what is set before it (`$V`, `${V}`,
`${V:-default}`; a build `ARG` given in `args` too), on top of Docker's default PATH. A base image from a
registry contributes nothing but that PATH (its own ENV is not known here).

    python dev/containers/dockerfile_env.py DOCKERFILE [ARG=VALUE ...]    # prints K=V lines

The CPU twins (twin_image.sh) put it in their image's config, so that a runtime that applies an image's
environment (pyxis; ch-run --set-env) sees what it would see in NVIDIA's image: the venv first on PATH.
"""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REF = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")


def _expand(value: str, env: dict[str, str], args: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        got = env.get(name, args.get(name))
        return got if got else (m.group(2) or "")
    return _REF.sub(one, value)


def environment(dockerfile: Path, args: dict[str, str] | None = None) -> dict[str, str]:
    """{name: value} of the Dockerfile's final stage."""
    args = dict(args or {})
    stages: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    text = re.sub(r"\\\n", " ", dockerfile.read_text())      # continuation lines
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            parts = rest.split()
            base = _expand(parts[0], {}, args)
            env = dict(stages.get(base, {"PATH": DEFAULT_PATH}))
            if len(parts) >= 3 and parts[1].upper() == "AS":
                stages[parts[2]] = env
        elif word.upper() == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args.setdefault(name.strip(), default.strip().strip('"'))
        elif word.upper() == "ENV":
            for item in shlex.split(rest):
                name, _, value = item.partition("=")
                env[name] = _expand(value, env, args)
    return env


if __name__ == "__main__":
    given = dict(a.split("=", 1) for a in sys.argv[2:])
    for key, value in environment(Path(sys.argv[1]), given).items():
        print(f"{key}={value}")
