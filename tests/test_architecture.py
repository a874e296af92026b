"""The rooms of ARCHITECTURE.md and the one rule of each: what it may import.

The rooms are read from the tree (every top-level package), so a new package must be given a rule
here and a row in ARCHITECTURE.md's table, which is checked against MAY_IMPORT. An import counts
however it is written: at the top of a file, lazily inside a function, as a string handed to
importlib.import_module / __import__, or as a "module:function" string. A string import whose module
is computed (a stage's module read from its recipe) cannot be checked, so each one is listed here.
Counted the same way: no modules import each other round a circle, and jobs/ stands on two floors
(JOBS_FLOORS). Also refused: a store layout name (lineage/layout.py's) spelled outside lineage/, and
any private name of submitit.
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: room -> the rooms of ours it may import (itself always).
MAY_IMPORT = {
    "lineage": set(),                                      # remembers: only the standard library and YAML
    "containers": set(),                                   # pins: reads containers.lock
    "stages": {"lineage", "containers"},                   # trains: the contract, the store's hashing
    "runtime": {"stages", "lineage"},                      # inside the allocation: never the launcher
    "jobs": {"runtime", "stages", "lineage", "containers"},  # launches
}
#: Folders of ours that are not rooms: they may import any room.
FREE = {"tests", "bench", "dev"}
#: Where a module is imported by a name computed at run time (file -> how many times), and why.
COMPUTED = {
    "runtime/entry.py": 1,                 # the recorded stage's module
    "jobs/plan.py": 1,                     # the recipe stage's module: check_config at submit
    "jobs/preview.py": 1,                  # its preview for --dry-run (local and Slurm)
    "jobs/executors/local.py": 1,          # the finished stage's HEADLINE metrics, printed at the end
}
#: stages/ on two floors: the shared pieces and backends below import no stage entry point above.
LOWER_FLOORS = ("stages/ml", "stages/backends")
CONTRACT = {"stages", "stages.contract", "stages.schema"}   # what every floor may use
IMPORTERS = {"import_module", "__import__"}
ENTRY_POINT = re.compile(r"^([A-Za-z_]\w*)(?:\.\w+)*:\w+$")   # "module.path:function"


def rooms(root: Path = ROOT) -> set[str]:
    """Every top-level package of the tree (a folder with __init__.py) is a room."""
    return {p.parent.name for p in root.glob("*/__init__.py")} - FREE


def _prefix(node: ast.expr) -> str | None:
    """The module a string argument names: a literal, or an f-string's literal start ("jobs.{x}")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = node.values[0].value
        return head.rstrip(".") if "." in head else None
    return None


def imports_in(path: Path) -> list[tuple[str, str, int]]:
    """(module, how, line) for every import in the file; how: static, lazy, string, entry or computed
    (module "?": a name made at run time). `from a.b import c` gives "a.b.c": c may be a module, or a
    name in a.b (`module_of` tells them apart)."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        how = "static" if id(node) in top else "lazy"
        if isinstance(node, ast.Import):
            found += [(a.name, how, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:   # each name: it may be a module
            found += [(f"{node.module}.{a.name}" if a.name != "*" else node.module, how, node.lineno) for a in node.names]
        elif isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in IMPORTERS:
                module = _prefix(node.args[0])
                found.append((module, "string", node.lineno) if module else ("?", "computed", node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = ENTRY_POINT.match(node.value)
            if m:
                found.append((node.value.split(":")[0], "entry", node.lineno))
    return found


def violations(root: Path = ROOT) -> list[str]:
    """Every import that breaks a room's rule, and every computed import COMPUTED does not list."""
    ours = rooms(root) | FREE
    wrong = []
    for room in sorted(rooms(root)):
        if room not in MAY_IMPORT:
            wrong.append(f"{room}/ is a package with no rule: add it to MAY_IMPORT and ARCHITECTURE.md's table")
            continue
        allowed = MAY_IMPORT[room] | {room}
        for path in sorted((root / room).rglob("*.py")):
            rel = str(path.relative_to(root))
            computed = 0
            for module, how, line in imports_in(path):
                top = module.split(".")[0]
                if how == "computed":
                    computed += 1
                elif top in ours and top not in allowed:
                    wrong.append(f"{rel}:{line} imports {module} ({how}); {room}/ may import only {sorted(allowed)}")
            if computed != COMPUTED.get(rel, 0):
                wrong.append(f"{rel} imports {computed} module(s) by a computed name; COMPUTED lists "
                             f"{COMPUTED.get(rel, 0)}: say which and why, or import by name")
    return wrong


def test_each_room_imports_only_what_its_rule_allows():
    assert not violations(), "\n".join(violations())


def test_the_rooms_are_the_packages_of_the_tree_and_the_documents_table_states_the_rule():
    assert rooms() == set(MAY_IMPORT), f"packages {sorted(rooms())} vs rules {sorted(MAY_IMPORT)}"
    table = {}
    for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+/`", cells[0]):
            table[cells[0].strip("`/")] = set(re.findall(r"`(\w+)`", cells[2]))
    assert table == MAY_IMPORT, f"ARCHITECTURE.md's room table {table} != the rule checked here {MAY_IMPORT}"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


ROOMS = {f"{r}/__init__.py": "" for r in MAY_IMPORT}


@pytest.mark.parametrize("how,line", [
    ("static", "import jobs.plan\n"),
    ("lazy", "def run(ctx):\n    from jobs.plan import make_plan\n"),
    ("string", "import importlib\n\ndef run(ctx):\n    return importlib.import_module('jobs.plan')\n"),
    ("string", "def run(ctx):\n    return __import__('jobs')\n"),
    ("string", "from importlib import import_module\n\ndef run(ctx):\n    return import_module(f'jobs.{ctx.stage}')\n"),
    ("entry", "HOOK = 'jobs.plan:make_plan'\n"),
])
def test_a_fixture_stage_importing_the_launcher_fails_the_check(tmp_path, how, line):
    root = write(tmp_path, {**ROOMS, "stages/bad.py": line})
    found = violations(root)
    assert len(found) == 1 and found[0].startswith("stages/bad.py:") and f"({how})" in found[0], found


def test_a_computed_import_not_listed_and_a_package_without_a_rule_fail_the_check(tmp_path):
    root = write(tmp_path, {**ROOMS, "stages/bad.py": "import importlib\n\ndef run(ctx):\n    importlib.import_module(ctx.config['m'])\n",
                            "plugins/__init__.py": "", "bench/x.py": "import jobs\n"})
    found = violations(root)
    assert len(found) == 2, found
    assert found[0].startswith("plugins/ is a package with no rule") and "stages/bad.py imports 1 module(s) by a computed name" in found[1]
    assert violations(write(tmp_path / "ok", {**ROOMS, "stages/good.py": "from lineage import Store\nimport torch\n"})) == []


def test_stages_stand_on_two_floors_and_read_the_allocation_from_the_context():
    """stages/ml/ and stages/backends/ import no stage (only the contract and each other), and no
    stage reads Slurm's variables: the runtime hands the allocation over as ctx.resources."""
    entry_points = {f"stages.{p.stem}" for p in (ROOT / "stages").glob("*.py")} | \
                   {f"stages.{p.parent.name}" for p in (ROOT / "stages").glob("*/__init__.py")}
    entry_points -= CONTRACT | {"stages.ml", "stages.backends"}
    assert {"stages.sft", "stages.rm", "stages.prep"} <= entry_points
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {module}"
             for floor in LOWER_FLOORS for p in sorted((ROOT / floor).rglob("*.py"))
             for module, _, line in imports_in(p)
             if any(module == e or module.startswith(e + ".") for e in entry_points)]
    assert not wrong, f"a shared piece or backend imports a stage: {wrong}"
    slurm = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in sorted((ROOT / "stages").rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and re.fullmatch(r"SLURM_\w+", n.value)]
    assert not slurm, f"stages read the allocation from ctx.resources, not Slurm's variables: {slurm}"


def test_the_stage_contract_and_the_runtime_load_without_the_launcher():
    code = ("import sys, stages.contract, stages.schema, runtime.entry, runtime.ray_cluster;"
            "print(sorted(m for m in sys.modules if m == 'jobs' or m.startswith('jobs.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def layout_names(path: Path = ROOT / "lineage" / "layout.py") -> set[str]:
    """The names of the store's folders and of a run folder's parts, as lineage/layout.py spells them:
    its string constants and each string it joins onto a path."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign) and all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            names |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
            names.add(node.right.value)
    return names


LAYOUT = layout_names()
#: The store's bookkeeping folders, which it exposes to lineage/ alone (`Store.records`, `Store.refs`).
BOOKKEEPING = {"records", "refs"}


def layout_strings(path: Path) -> list[str]:
    """`line: text` of each string that builds a store or run-folder path by hand: a layout name
    joined with `/`, given to Path() or os.path.join, or in a glob pattern; and each use of the
    store's bookkeeping folders (`store.records`, `store.refs`) instead of asking the store."""
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
        if isinstance(node, ast.Attribute) and node.attr in BOOKKEEPING and \
                not (isinstance(node.value, ast.Name) and node.value.id == "lineage"):   # the modules lineage.records/refs
            found.append(f"{node.lineno}: .{node.attr}")
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
                   'def g(d):\n    return sorted(d.glob("*/checkpoints/keep/*.json"))\n'
                   'def h(store):\n    return store.refs, lineage.records.strict_json\n')
    assert len(layout_strings(bad)) == 4
    assert {"records", "refs", "runs", "logs", "checkpoints", "keep", "metrics.jsonl", "controller.err"} <= LAYOUT


# ---- no import circles -----------------------------------------------------------------------


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the rooms by its dotted name (a package by its own: `jobs.executors`)."""
    found = {}
    for room in rooms(root):
        for path in sorted((root / room).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def module_of(name: str, known) -> str | None:
    """The module of ours an import names: the longest dotted head of `name` that is one."""
    parts = name.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in known), None)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of ours it imports, however written. The parent package Python runs
    before a module is not an edge: only a package named in an import is."""
    known = modules(root)
    return {name: {m for module, how, _ in imports_in(path) if how != "computed"
                   and (m := module_of(module, known)) is not None and m != name}
            for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Each set of modules that import each other, round and round (a strongly connected component,
    Tarjan's), as its edges: "a -> b; b -> a"."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            members = set()
            while True:
                w = stack.pop()
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append("; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in sorted(members)))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_circle():
    """A circle makes the import order matter and the modules one piece: it is refused, however
    each import is written (top of the file, in a function, a string)."""
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(found)


@pytest.mark.parametrize("files,expected", [
    ({"jobs/a.py": "import jobs.b\n", "jobs/b.py": "def f():\n    from jobs import a\n"}, ["jobs.a -> jobs.b; jobs.b -> jobs.a"]),
    ({"jobs/a.py": "from jobs.b import g\n", "jobs/b.py": "from jobs.c import h\n",
      "jobs/c.py": "import importlib\n\ndef h():\n    return importlib.import_module('jobs.a')\n"},
     ["jobs.a -> jobs.b; jobs.b -> jobs.c; jobs.c -> jobs.a"]),
    ({"jobs/a.py": "from jobs.b import g\n", "jobs/b.py": "import lineage\n"}, []),
    # a package importing its module, which imports a sibling through the package: no circle
    ({"jobs/p/__init__.py": "from jobs.p import x\n", "jobs/p/x.py": "from jobs.p import y\n", "jobs/p/y.py": ""}, []),
])
def test_the_circle_check_finds_a_fixture_circle_and_only_one(tmp_path, files, expected):
    assert circles(import_graph(write(tmp_path, {**ROOMS, **files}))) == expected


# ---- jobs/ on two floors ---------------------------------------------------------------------
#: Every module of jobs/ on one floor. Below: the submission path (plan, settle and record, the
#: executors that launch, watch and stop a job) and what it is made of. Above: the commands that
#: read the store and show it. A module below never imports one above.
JOBS_FLOORS = {
    "below": {"jobs", "jobs.errors", "jobs.recipes", "jobs.profiles", "jobs.containers", "jobs.provenance",
              "jobs.bundle", "jobs.chains", "jobs.plan", "jobs.grid", "jobs.record", "jobs.submit", "jobs.preview", "jobs.drift",
              "jobs.executors", "jobs.executors.base", "jobs.executors.local", "jobs.executors.slurm",
              "jobs.reconcile", "jobs.cancel", "jobs.triage", "jobs.logfiles", "jobs.cost"},
    "above": {"jobs.cli", "jobs.shell", "jobs.completion", "jobs.status", "jobs.progress", "jobs.logs", "jobs.show",
              "jobs.report", "jobs.compare", "jobs.metrics", "jobs.filters", "jobs.maintenance", "jobs.export",
              "jobs.add", "jobs.sweep", "jobs.reproduce", "jobs.timeline"},
}


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import from below to above, and each jobs module on no floor or on both."""
    below, above = JOBS_FLOORS["below"], JOBS_FLOORS["above"]
    ours = {m for m in graph if m == "jobs" or m.startswith("jobs.")}
    wrong = [f"{m} is on no floor of JOBS_FLOORS (or on both): place it" for m in sorted(ours) if (m in below) == (m in above)]
    wrong += [f"{m} (below) imports {n} (above)" for m in sorted(below & ours) for n in sorted(graph[m] & above)]
    return wrong


def test_the_launcher_stands_on_two_floors():
    assert not floor_violations(import_graph()), "\n".join(floor_violations(import_graph()))


def test_the_floor_check_refuses_a_submission_module_importing_a_command():
    graph = {m: set() for floor in JOBS_FLOORS.values() for m in floor}
    assert floor_violations(graph) == []
    graph["jobs.plan"] = {"jobs.show", "jobs.recipes"}
    graph["jobs.newcomer"] = set()
    assert floor_violations(graph) == ["jobs.newcomer is on no floor of JOBS_FLOORS (or on both): place it",
                                       "jobs.plan (below) imports jobs.show (above)"]


# ---- submitit: its public names only ---------------------------------------------------------


def submitit_privates(path: Path) -> list[str]:
    """`line: what` of each private of submitit (a name starting with `_`) the file imports or uses:
    an import in any form, an attribute reached from the module (`submitit.x._y`), or, in a file that
    imports submitit, an attribute got by its name as a string (getattr(job, "_process")). The job's
    command line that submitit writes (`-m submitit.core._submit`) is no import: it is not counted."""
    found = []
    uses = False
    for module, how, line in imports_in(path):
        if module.split(".")[0] == "submitit":
            uses = True
            if any(part.startswith("_") for part in module.split(".")[1:]):
                found.append(f"{line}: imports {module} ({how})")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            chain = node.value
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            if isinstance(chain, ast.Name) and chain.id == "submitit":
                found.append(f"{node.lineno}: uses submitit's .{node.attr}")
        elif (uses and isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and node.args[1].value.startswith("_")):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_only_submitits_public_api_is_used():
    wrong = {str(p.relative_to(ROOT)): submitit_privates(p) for room in sorted(rooms())
             for p in sorted((ROOT / room).rglob("*.py")) if submitit_privates(p)}
    assert not wrong, f"submitit's private names (they change without notice): {wrong}"


def test_the_submitit_check_catches_each_way_of_reaching_a_private(tmp_path):
    bad = write(tmp_path, {"bad.py": "import submitit\nfrom submitit.slurm.slurm import _make_sbatch_string\n"
                                     "def f(job):\n    from submitit.core import _submit\n"
                                     "    submitit.slurm.slurm._shlex_join([])\n    return getattr(job, '_process')\n"})
    assert len(submitit_privates(bad / "bad.py")) == 4
    good = write(tmp_path / "ok", {"ok.py": "from submitit.core.utils import JobPaths\nimport submitit\n"
                                           "def f(job):\n    return getattr(job, 'state'), submitit.SlurmExecutor\n"})
    assert submitit_privates(good / "ok.py") == []
