"""What an NVIDIA image's own lock says its Python holds, for the CPU twins of the images (dev/twin_venv.sh).

    python dev/twin_lock.py pins UV_LOCK NAME...      NAME==VERSION for each NAME (the twin's requirements)
    python dev/twin_lock.py constraints UV_LOCK [NAME...]   NAME==VERSION for every package the lock holds at
                                                      one version from a registry (what the requirements pull
                                                      in resolves to the image's versions too), but the NAMEs
                                                      (stand-ins: torch, the machine's CPU build)
    python dev/twin_lock.py check UV_LOCK PYTHON NAME...   one line per NAME whose version in PYTHON's
                                                      environment differs from the lock; exit 1 if any

A package the lock holds at two versions (torch 2.9.0 and 2.9.0+cu129: one per platform or extra) is
not a constraint; one from git or a workspace folder is not on PyPI. Standard library only (tomllib).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def versions(lock_text: str) -> dict[str, set[str]]:
    """{package: its versions} of the registry packages in a uv.lock."""
    found: dict[str, set[str]] = defaultdict(set)
    for pkg in tomllib.loads(lock_text)["package"]:
        if "registry" in (pkg.get("source") or {}) and pkg.get("version"):
            found[_canon(pkg["name"])].add(pkg["version"])
    return dict(found)


def pins(lock_text: str, names: list[str]) -> list[str]:
    held = versions(lock_text)
    out = []
    for raw in names:
        name = _canon(raw.split("[", 1)[0])
        extras = raw[len(raw.split("[", 1)[0]):]
        if len(held.get(name, ())) != 1:
            raise SystemExit(f"twin_lock: the lock holds {name} at {sorted(held.get(name, ())) or 'no version'}")
        out.append(f"{name}{extras}=={next(iter(held[name]))}")
    return out


def constraints(lock_text: str, leave: list[str] = ()) -> list[str]:
    leave = {_canon(n) for n in leave}
    return [f"{name}=={next(iter(vs))}" for name, vs in sorted(versions(lock_text).items())
            if len(vs) == 1 and name not in leave]


def installed(python: str, names: list[str]) -> dict[str, str | None]:
    """{package: version in that interpreter's environment, None if absent}."""
    code = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n"
            "        out[n] = None\nprint(json.dumps(out))")
    res = subprocess.run([python, "-c", code, *names], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def mismatches(lock_text: str, have: dict[str, str | None]) -> list[str]:
    """One line per package whose installed version is not the lock's."""
    held = versions(lock_text)
    out = []
    for name, version in sorted(have.items()):
        want = held.get(_canon(name), set())
        if version not in want:
            out.append(f"{name}: the twin has {version or 'nothing'}, the image's lock {', '.join(sorted(want)) or 'nothing'}")
    return out


def main(argv: list[str]) -> int:
    cmd, lock = argv[0], Path(argv[1]).read_text()
    if cmd == "pins":
        print("\n".join(pins(lock, argv[2:])))
    elif cmd == "constraints":
        print("\n".join(constraints(lock, argv[2:])))
    elif cmd == "check":
        names = [_canon(n.split("[", 1)[0]) for n in argv[3:]]
        bad = mismatches(lock, installed(argv[2], names))
        print("\n".join(bad) or f"twin_lock: {len(names)} packages at the lock's versions")
        return 1 if bad else 0
    else:
        raise SystemExit(f"twin_lock: unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
