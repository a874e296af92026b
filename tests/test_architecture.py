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


#: The names of the store's folders and of a run folder's parts (lineage/layout.py spells them).
LAYOUT = {"records", "refs", "runs", "code", "imports", "runtime", "logs", "outputs", "attempts", "checkpoints",
          "keep", "progress.json", "metrics.jsonl"}


def layout_strings(path: Path) -> list[str]:
    """`line: text` of each string that builds a store or run-folder path by hand: a layout name
    joined with `/`, given to Path() or os.path.join, or in a glob pattern."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def check(node) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if LAYOUT & set(node.value.split("/")):
                found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            for part in node.values:
                check(part)

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            check(node.left)
            check(node.right)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("Path", "join", "glob", "rglob", "joinpath", "folder"):
                for arg in node.args:
                    check(arg)
    return found


def test_only_lineage_spells_the_store_layout():
    """Paths in the store and in a run's folder come from lineage/ (lineage.layout, Store): a layout
    name joined by hand anywhere else is refused, so the layout changes in one place."""
    wrong = {str(p.relative_to(ROOT)): layout_strings(p)
             for room in sorted(set(MAY_IMPORT) - {"lineage"}) for p in sorted((ROOT / room).rglob("*.py"))
             if layout_strings(p)}
    assert not wrong, f"store or run-folder paths built outside lineage/: {wrong}"


def test_the_layout_check_catches_a_hand_made_run_path(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(store, run):\n    return store.root / "runs" / run / f"logs"\n'
                   'def g(d):\n    return sorted(d.glob("*/checkpoints/keep/*.json"))\n')
    assert len(layout_strings(bad)) == 3
