"""The rooms of ARCHITECTURE.md and the one rule of each: what it may import. Lazy imports inside
functions count too: a room that imports the launcher at run time still depends on it."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"jobs", "runtime", "stages", "lineage", "containers", "recipes", "bench", "tests"}
#: room -> the rooms of ours it may import (itself always).
MAY_IMPORT = {
    "lineage": set(),                                      # remembers: only the standard library and YAML
    "containers": set(),                                   # pins: reads containers.lock
    "stages": {"lineage", "containers"},                   # trains: the contract, the store's hashing
    "runtime": {"stages", "lineage"},                      # inside the allocation: never the launcher
    "jobs": {"runtime", "stages", "lineage", "containers"},  # launches
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_each_room_imports_only_what_its_rule_allows(room):
    allowed = MAY_IMPORT[room] | {room}
    wrong = {str(p.relative_to(ROOT)): sorted(imports_of(p) - allowed)
             for p in sorted((ROOT / room).rglob("*.py")) if imports_of(p) - allowed}
    assert not wrong, f"{room}/ may import only {sorted(allowed)}; these files import more: {wrong}"


def test_the_rule_catches_a_launcher_import(tmp_path):
    """The checker itself: a stage file importing the launcher lazily is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from jobs.plan import make_plan\n    import runtime.entry\n")
    assert imports_of(bad) == {"jobs", "runtime"}


def test_the_stage_contract_and_the_runtime_load_without_the_launcher():
    code = ("import sys, stages.contract, stages.schema, runtime.entry, runtime.ray_cluster;"
            "print(sorted(m for m in sys.modules if m == 'jobs' or m.startswith('jobs.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
