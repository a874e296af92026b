"""The megatron-core containers.lock pins for the nemo image runs Megatron-Bridge nano-v3 (1cedb0a9c, the
Bridge of nemo:25.11.nemotron_3_nano): every `from megatron.core... import` at the top of a module that
Bridge's training/pretrain.py reaches (Bridge's own imports followed from its source) is executed against
that megatron-core's source from the mirror, and its TransformerConfig takes nano-v3's TP 4 with 2 query
groups, the rule our layout check applies for it."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import yaml

from twin import ROOT, source

PY = ROOT / ".venv" / "bin" / "python"    # torch; megatron-core comes from the source alone


def core_imports(src: Path, start: str = "megatron.bridge.training.pretrain") -> list[str]:
    """The module-level `from megatron.core… import …` statements of every Bridge module `start` reaches."""
    def file_of(mod: str) -> Path | None:
        p = src.joinpath(*mod.split("."))
        return next((f for f in (p.with_suffix(".py"), p / "__init__.py") if f.exists()), None)

    todo, seen, found = [start], set(), set()
    while todo:
        mod = todo.pop()
        if mod in seen or (f := file_of(mod)) is None:
            continue
        seen.add(mod)
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.startswith("megatron.bridge"):
                    todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                elif node.module.startswith("megatron.core"):
                    found.add(ast.unparse(node))
    return sorted(found)


def test_the_locks_megatron_core_has_what_bridge_nano_v3s_pretrain_imports_and_takes_its_tp(tmp_path):
    from stages.backends.megatron import config

    pinned = str(yaml.safe_load((ROOT / "containers/containers.lock").read_text())["nemo"]["libraries"]["megatron_core"])
    commit = pinned.split("@", 1)[1].rstrip("+")[:9]
    mcore = source(f"megatron-lm-{commit}.tar.gz", tmp_path / "mcore")
    bridge = source("megatron-bridge-1cedb0a9c.tar.gz", tmp_path / "bridge")
    statements = core_imports(bridge / "src")
    assert "from megatron.core.jit import disable_jit_fuser" in statements   # training/setup.py:25
    code = ("import sys, warnings\nwarnings.filterwarnings('ignore')\nfor line in sys.argv[1:]:\n    try:\n"
            "        exec(line, {})\n    except Exception as e:\n        print(f'{line}: {type(e).__name__}: {e}')\n"
            "from megatron.core.transformer.transformer_config import TransformerConfig\n"
            "TransformerConfig(num_layers=2, hidden_size=128, num_attention_heads=32, num_query_groups=2,"
            " tensor_model_parallel_size=4)\n")
    r = subprocess.run([str(PY), "-c", code, *statements], capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(mcore), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout == "", (r.stdout + r.stderr)[-2000:]
    assert config.query_groups_rule(pinned) == "multiple or divisor"
