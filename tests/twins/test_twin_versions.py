"""Each twin holds its image's versions: every library the job's path imports there is at the version of
the image's own uv.lock (NeMo RL 823fcc904's for nemo-rl, Megatron-Bridge 1cedb0a9c's for nemo), read from
the lock, not restated; the only exceptions are the stand-ins and absences dev/twin_standins.txt lists
(torch: a CPU build; Transformer Engine: none). The nemo-rl image's vLLM and Megatron worker venvs are
twins of their own (nemo-rl-vllm, nemo-rl-mcore), with the same NeMo RL lock."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from twin import ROOT, TWINS

TOOL = ROOT / "dev" / "twin_lock.py"
sys.path.insert(0, str(TOOL.parent))
#: A library of each twin and another version to plant in a copy of its lock.
PLANT = {"nemo-rl": ("ray", "2.49.2", "2.52.0"), "nemo-rl-vllm": ("vllm", "0.11.2", "0.11.1"),
         "nemo-rl-mcore": ("nvidia-modelopt", "0.39.0", "0.37.0"), "nemo": ("transformers", "4.57.1", "4.57.3")}
twins = pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.image)


def check(twin, lock) -> subprocess.CompletedProcess:
    twin.require()
    names = twin.venv.joinpath("packages.txt").read_text().split()
    return subprocess.run([sys.executable, str(TOOL), "check", str(lock), str(twin.py), *names], capture_output=True, text=True)


@twins
def test_every_library_the_twin_was_built_with_is_at_the_images_lock_version(twin):
    r = check(twin, twin.lock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {PLANT[twin.image][0], "transformers"} <= {n.split("[")[0] for n in twin.venv.joinpath("packages.txt").read_text().split()}


@twins
def test_a_twin_library_at_another_version_than_the_lock_is_named(twin, tmp_path):
    name, have, other = PLANT[twin.image]
    planted, n = re.subn(rf'(name = "{name}"\nversion = "){re.escape(have)}"', rf'\g<1>{other}"', twin.lock.read_text())
    assert n == 1
    (tmp_path / "uv.lock").write_text(planted)
    r = check(twin, tmp_path / "uv.lock")
    assert r.returncode == 1
    assert r.stdout.strip() == f"{name}: the twin has {have}, the image's lock {other}"


def standins(image: str) -> list[list[str]]:
    """dev/twin_standins.txt's rows for one twin: [name, version or "-", why]."""
    rows = [line.split(maxsplit=3) for line in (ROOT / "dev/twin_standins.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [row[1:] for row in rows if image in row[0].split(",")]


@twins
def test_the_only_libraries_at_another_version_are_the_listed_stand_ins(twin):
    from twin_lock import installed, versions

    twin.require()
    held = versions(twin.lock.read_text())
    rows = standins(twin.image)
    assert rows and rows[0][0] == "torch"
    have = installed(str(twin.py), [name for name, _, _ in rows])
    for name, version, _why in rows:
        if version == "-":
            assert have[name] is None, (name, have[name])
        else:
            assert have[name] == version and version not in held.get(name, ()), (name, have[name], held.get(name))
