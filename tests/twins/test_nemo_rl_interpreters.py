"""Which Python of the nemo-rl image runs what: the image's default venv (the twin) lacks megatron.bridge
and vLLM; NeMo RL's own build step (prefetch_venvs.py, run here with a `uv` that only logs) makes the
worker venvs and a /usr/local/bin/python-<Worker> wrapper for each. What our stages launch there must be
one of those wrappers, over a venv synced with the extra that holds the library."""
from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from twin import NEMO_RL, PY, ROOT, require

require()


@pytest.fixture(scope="module")
def wrappers(tmp_path_factory) -> dict[str, str]:
    """{wrapper path in the image: the NeMo RL extra its venv is synced with}."""
    out = tmp_path_factory.mktemp("image")
    subprocess.run([str(ROOT / "tests/twins/nemo_rl_wrappers.sh"), str(PY), str(out)], check=True,
                   capture_output=True, timeout=120)
    extras = {}
    for line in (out / "uv.log").read_text().splitlines():
        venv, _, args = line.partition(" ")
        if m := re.search(r"run --locked --extra (\S+)", args):
            extras[venv] = m.group(1)
    found = {}
    for w in (out / "bin").glob("python-*"):
        venv = re.search(r'VENV_PATH="([^"]+)"', w.read_text()).group(1)
        found[f"/usr/local/bin/{w.name}"] = extras[venv]
    return found


def extra_holds(extra: str, package: str) -> bool:
    deps = tomllib.loads((NEMO_RL / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    return any(re.match(rf"{package}\b", d) for d in deps)


def default_python_has(module: str) -> bool:
    r = subprocess.run([str(PY), "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"])
    return r.returncode == 0


def test_rl_export_runs_the_megatron_converter_with_the_images_python_that_has_megatron_bridge(tmp_path, wrappers):
    from stages.backends import nemo_rl

    source = (NEMO_RL / "nemo_rl/models/megatron/community_import.py").read_text()
    assert re.search(r"^from megatron\.bridge import", source, re.M)   # the converter needs it at import
    assert not default_python_has("megatron") and not default_python_has("megatron.bridge")
    step = tmp_path / "step_4"
    (step / "policy" / "weights" / "iter_0000004").mkdir(parents=True)
    cmd = nemo_rl.export_command(step, tmp_path / "hf")
    assert cmd[1] == str(nemo_rl.REPO / "examples/converters/convert_megatron_to_hf.py")
    assert cmd[0] in wrappers, f"{cmd[0]} is not a Python of the image with megatron.bridge"
    assert extra_holds(wrappers[cmd[0]], "megatron-bridge")
