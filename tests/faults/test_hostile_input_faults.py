"""Hostile input to sweeps, records and containers.lock: refused in one line, never a hang.

Every case runs the real `jobs` command on a copy of a store where testchain's count stage ran once,
with a time limit (a case past it counts as a hang), and must exit 2 with exactly one `jobs: error:`
line naming the fault, no traceback, and the store and containers.lock byte for byte as before. The
cases are counted in one summary line at the end of the module, as the other fault suites do; each
case also prints how long its refusal took.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from helpers import JOBS, count_once, tree_state
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
TIMEOUT = 60     # a case still running after this is a hang (the refusals take about a second)


def base_env(tmp: Path) -> dict:
    return {"HOME": str(tmp / "home"), "JOBS_CACHE_DIR": str(tmp / "cache"),
            "JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> Path:
    """A store in which testchain's count stage succeeded once (copied, never changed, by the cases)."""
    tmp = tmp_path_factory.mktemp("counted")
    return count_once(tmp, base_env(tmp))


@dataclass
class Box:
    tmp: Path
    store: Path
    env: dict

    def count_run(self) -> str:
        (run,) = [r["id"] for r in Store(self.store).index().runs(stage="count")]
        return run


@pytest.fixture
def box(tmp_path, monkeypatch, counted) -> Box:
    for d in ("home", "cwd", "cache"):
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "store"
    shutil.copytree(counted, store, symlinks=True)
    return Box(tmp_path, store, base_env(tmp_path))


@dataclass
class Case:
    id: str
    item: str                                   # which class: sweep, grid, reproduce, lock, pin, runtime
    prepare: Callable[[Box], list[str]]         # -> the command's arguments
    message: str                                # in the one stderr line (exit 2)
    watch: Callable[[Box], list[Path]] = lambda b: []   # files outside the store that must not change


def sweep(id: str, *specs: str, message: str, stage: str = "count", item: str = "sweep") -> Case:
    args = ["submit", "testchain", "--stage", stage, *(x for s in specs for x in ("--sweep", s)), "--dry-run"]
    return Case(id, item, lambda b: args, message)


def edit_record(change: Callable[[dict], None]) -> Callable[[Box], list[str]]:
    """Change the count run's record file in place, as anyone who may write the store can."""
    def prepare(b: Box) -> list[str]:
        run = b.count_run()
        path = next((b.store / "records" / "run").rglob(f"{run}.json"))
        body = json.loads(path.read_text())
        change(body)
        path.chmod(0o644)
        path.write_text(json.dumps(body))
        return ["reproduce", run]
    return prepare


def added_inputs_event(b: Box) -> list[str]:
    """An `inputs` event planted among the run's events: the view's inputs no longer match the key."""
    run = b.count_run()
    s = Store(b.store)
    (art,) = s.run(run).outputs.values()
    s.add_event(run, "inputs", inputs={"numbers": art})
    return ["reproduce", run]


def _set(path: str, value) -> Callable[[dict], None]:
    def change(body: dict) -> None:
        *head, last = path.split(".")
        d = body
        for k in head:
            d = d[k]
        d[last] = value
    return change


def reproduce_case(id: str, change: Callable[[dict], None], message: str = "no longer hashes to the run key") -> Case:
    return Case(id, "reproduce", edit_record(change), message)


DIGEST = "sha256:" + "ab" * 32
GOOD_LOCK = "tiny-cpu:\n  image: 127.0.0.1:5443/jobs/tiny-cpu:0.1\n  digest: sha256:" + "cd" * 32 + "\n"
LOCK_READERS = {"list": ["containers", "list"], "pin": ["containers", "pin", "tiny-cpu", "--digest", DIGEST],
                "import": ["containers", "import", "tiny-cpu", "--dry-run"],
                "submit": ["submit", "tiny", "--stage", "data", "--executor", "slurm", "--dry-run"]}


def machine_lock(b: Box) -> Path:
    return b.tmp / "machine.lock"


def lock_case(id: str, text: str, reader: str, message: str) -> Case:
    """The machine's lock ($JOBS_CONTAINERS_LOCK) holds `text`; `reader` reads it."""
    def prepare(b: Box) -> list[str]:
        machine_lock(b).write_text(text.replace("MARKER", str(b.tmp / "owned")))
        b.env["JOBS_CONTAINERS_LOCK"] = str(machine_lock(b))
        return LOCK_READERS[reader]
    return Case(f"{id} ({reader})", "lock", prepare, message, watch=lambda b: [machine_lock(b), b.tmp / "owned"])


def pin_case(value: str) -> Case:
    def prepare(b: Box) -> list[str]:
        machine_lock(b).write_text(GOOD_LOCK)
        b.env["JOBS_CONTAINERS_LOCK"] = str(machine_lock(b))
        return ["containers", "pin", "tiny-cpu", "--digest", DIGEST, "--image", value]
    return Case(f"pin --image {value}", "pin", prepare, "bad image", watch=lambda b: [machine_lock(b)])


def pyxis_submit(b: Box) -> list[str]:
    """A real submit (no --dry-run) of a stage whose image is pinned, under the default runtime, pyxis
    (which the development machines lack)."""
    srun = subprocess.run(["sh", "-c", "srun --help 2>&1"], capture_output=True, text=True).stdout
    if "--container-image" in srun:
        pytest.skip("this machine's srun has pyxis")
    machine_lock(b).write_text(GOOD_LOCK)
    b.env["JOBS_CONTAINERS_LOCK"] = str(machine_lock(b))
    return ["submit", "tiny", "--stage", "data", "--executor", "slurm"]


BAD_LOCKS = [
    ("yaml error", "tiny-cpu: {image: [x\n", "not valid YAML"),
    ("list at top", "- tiny-cpu\n- nemo\n", "expected a mapping of image names"),
    ("entry a string", "tiny-cpu: 127.0.0.1:5443/jobs/tiny-cpu:0.1\n", "must be a mapping"),
    ("entry without image", "mine: {digest: null}\n", "image is missing"),
    ("python tag", "tiny-cpu: !!python/object/apply:os.system ['touch MARKER']\n", "not valid YAML"),
    ("image a number", "tiny-cpu: {image: 5, digest: null}\n", "image must be a string"),
    ("digest a list", "tiny-cpu: {image: x/y:1, digest: [1]}\n", "digest must be a string"),
]


CASES = [
    # grids sized from the axes' arithmetic before any point is listed
    Case("grid 10^6 one axis", "grid", lambda b: ["submit", "tiny", "--stage", "data", "--sweep",
                                                   "data.n_sft=range(1000,1001000)", "--dry-run"],
         "1000000 values; a sweep has at most"),
    sweep("grid 10^6 two axes", "count.steps=range(0,1000)", "count.step_s=range(0,1000)",
          message="a grid of 1000 x 1000 = 1000000 points", item="grid"),
    sweep("grid 10^12 two axes", "count.steps=range(0,1000000)", "count.step_s=range(0,1000000)",
          message="1000000 values", item="grid"),
    sweep("grid 10^20 values", "count.steps=range(0,100000000000000000000)", message="1e+20 values", item="grid"),
    sweep("grid 10**20", "count.steps=range(10**20)", message="bad --sweep", item="grid"),
    sweep("grid float step tiny", "count.step_s=range(0,1,1e-300)", message="1e+300 values", item="grid"),
    sweep("grid three axes", "count.steps=range(0,200)", "count.step_s=range(0,200)", "+count.x=range(0,200)",
          message="= 8000000 points", item="grid"),
    # sweep expressions: one reading, each refused in one line
    sweep("range step zero", "count.steps=range(1,10,0)", message="range() step is 0"),
    sweep("range empty", "count.steps=range(5,5)", message="has no values"),
    sweep("range backwards", "count.steps=range(1,10,-1)", message="has no values"),
    sweep("range infinite", "count.step_s=range(0,inf)", message="finite numbers"),
    sweep("range nan", "count.step_s=range(0,nan)", message="finite numbers"),
    sweep("choice in choice", "count.steps=choice(choice(1,2),3)", message="a sweep inside a sweep"),
    sweep("two ranges", "count.steps=range(1,3),range(5,6)", message="a sweep inside a sweep"),
    sweep("glob", "count.steps=glob(*)", message="glob() picks config groups"),
    sweep("shuffle", "count.steps=shuffle(1,2,3)", message="shuffle() gives a new order"),
    sweep("shuffle empty", "count.steps=shuffle()", message="shuffle() gives a new order"),
    sweep("shuffle range", "count.steps=shuffle(range(1,4))", message="shuffle() gives a new order"),
    sweep("interval", "count.step_s=interval(0,1)", message="interval() has no points"),
    sweep("empty choice", "count.steps=choice()", message="empty choice"),
    sweep("unbalanced", "count.steps=range(1,", message="bad --sweep"),
    sweep("repeated value", "count.steps=1,1", message="a value is repeated"),
    sweep("key of another stage", "double.fail=true,false", message="sets the config of stage double"),
    sweep("key of another stage second", "count.steps=1,2", "double.fail=true,false",
          message="sets the config of stage double"),
    # a record edited after it was recorded is refused by reproduce before anything runs it
    reproduce_case("record config edited", _set("config.count.steps", 3)),
    reproduce_case("record input added", _set("inputs", {"numbers": "art_" + "0" * 64})),
    reproduce_case("record module edited", _set("module", "teststages.double")),
    reproduce_case("record stage edited", _set("stage", "double")),
    reproduce_case("record environment edited", _set("environment.digest", "sha256:" + "0" * 64)),
    reproduce_case("record code edited", lambda body: body["code"].update(snapshot="art_" + "1" * 64),
                   message="no longer hashes to the run key"),
    reproduce_case("record config retyped", _set("config", [1, 2]), message="'config' is missing or not a dict"),
    reproduce_case("record key removed", lambda body: body.pop("run_key"), message="records no run key"),
    Case("inputs event planted", "reproduce", added_inputs_event, "no longer hashes to the run key"),
    # a malformed lock, refused by every command that reads it; hostile --image values never written
    *(lock_case(id, text, reader, message) for id, text, message in BAD_LOCKS for reader in LOCK_READERS),
    *(pin_case(v) for v in ['"x', "{x", "[x", "*x", "&x", "!x", "%x", "|", ">", "x\ny", "a: b", "x #y"]),
    # a container runtime the cluster does not offer: refused at submit, not in the queue
    Case("pyxis not installed", "runtime", pyxis_submit, "pyxis is not installed"),
]


RESULTS: list[dict] = []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_refused_in_one_line_and_changes_nothing(case: Case, box: Box):
    args = case.prepare(box)
    Store(box.store).index()          # a read command may sync the index (in the per-host cache, not the store)
    watched = case.watch(box)
    before = (tree_state(box.store), [p.read_bytes() if p.exists() else None for p in watched])
    t0 = time.monotonic()
    try:
        p = subprocess.run([JOBS, "--store", str(box.store), *args], capture_output=True, text=True,
                           env={**os.environ, **box.env}, timeout=TIMEOUT)
        code, out, err, hang = p.returncode, p.stdout, p.stderr, False
    except subprocess.TimeoutExpired as e:
        code, out, err, hang = None, str(e.stdout or ""), str(e.stderr or ""), True
    took = time.monotonic() - t0
    after = (tree_state(box.store), [p.read_bytes() if p.exists() else None for p in watched])
    result = {"case": case.id, "item": case.item, "hang": hang, "traceback": "Traceback" in out + err,
              "one_line": code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("jobs: error: ")
              and case.message in err, "store_changed": after != before}
    RESULTS.append(result)
    print(f"\n{case.id}: {took:.2f}s: {err.strip()}")
    assert not hang, f"still running after {TIMEOUT}s"
    assert not result["traceback"], err
    assert result["one_line"], (code, out, err)
    assert not result["store_changed"], "the store (or containers.lock) changed on an error"


def test_summary():
    """One count over the cases above, as the other fault suites report them."""
    if len(RESULTS) < len(CASES):
        pytest.skip("the summary needs every case of this module to have run")
    summary = {"cases": len(RESULTS), "clean one-line errors": sum(r["one_line"] for r in RESULTS),
               "tracebacks": sum(r["traceback"] for r in RESULTS), "hangs": sum(r["hang"] for r in RESULTS),
               "store changes on error": sum(r["store_changed"] for r in RESULTS)}
    items = sorted({r["item"] for r in RESULTS})
    print("\nhostile input faults: " + ", ".join(f"{k} {v}" for k, v in summary.items()) + f" (items: {', '.join(items)})")
    assert summary == {"cases": len(CASES), "clean one-line errors": len(CASES), "tracebacks": 0, "hangs": 0,
                       "store changes on error": 0}


# ---- a team store: members add, never remove another member's records --------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="making a second Unix user needs root (CI has it)")
def test_a_team_member_adds_records_but_cannot_remove_another_members(tmp_path):
    from helpers import MATE, run_jobs, team_store

    with team_store() as (top, root):
        env = {**base_env(tmp_path), "HOME": str(tmp_path)}
        r = run_jobs(root, "submit", "testchain", "--stage", "count", "count.steps=2", "count.step_s=0", env=env)
        assert r.code == 0, r.err
        s = Store(root)
        (run,) = [x["id"] for x in s.index().runs()]
        record = next((root / "records" / "run").rglob(f"{run}.json"))
        ref = root / "refs" / "testchain" / "count" / "result"
        mine = [record, ref / "v000001.json", next((root / "records" / "event").rglob("*.json")),
                next((root / "records" / "artifact").rglob("*.json"))]

        def mate(*cmd: str) -> subprocess.CompletedProcess:
            return subprocess.run(["runuser", "-u", MATE, "--", *cmd], capture_output=True, text=True, cwd="/")

        for f in mine:   # neither unlinked nor renamed away by another member
            assert mate("rm", "-f", str(f)).returncode != 0 and f.exists(), f
            assert mate("mv", str(f), str(f.parent / "gone.json")).returncode != 0 and f.exists(), f
        assert mate("rm", "-rf", str(root / "runs" / run)).returncode != 0 and (root / "runs" / run).is_dir()
        assert mate("cat", str(ref / ".latest")).stdout.strip() == "1"   # the hint is the group's to read
        # The member adds a version of the owner's name: the hint, not the member's to replace, is
        # rewritten in place, and both resolve :latest from it.
        (art,) = s.run(run).outputs.values()
        add = mate("/usr/bin/python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); from lineage import refs; "
                   "print(refs.add(__import__('pathlib').Path(sys.argv[2]), 'testchain/count/result', sys.argv[3], None))",
                   str(Path(__file__).parents[2]), str(root / "refs"), art)
        assert add.returncode == 0 and add.stdout.strip() == "2", add.stderr
        assert (ref / ".latest").read_text().strip() == "2" and (ref / "v000002.json").exists()
        assert (ref / ".latest").stat().st_uid == os.getuid()      # still the owner's file
        shown = run_jobs(root, "show", "testchain/count/result:latest", env=env)
        assert shown.code == 0 and "v2" in shown.out, shown.out + shown.err


# ---- jobs add and jobs show: odd paths and terminal control sequences ---------------------------
def test_add_takes_dot_dot_and_show_escapes_control_sequences(box: Box):
    from helpers import run_jobs

    corpus = box.tmp / "cwd" / "corpus"
    (corpus / "inner").mkdir(parents=True)
    (corpus / "train.txt").write_text("one document\n")
    (corpus / "odd\x1b[2Jname.txt").write_text("x\n")
    source = "https://example.org/c\x1b]0;owned\x07"
    p = subprocess.run([JOBS, "--store", str(box.store), "add", "..", "--kind", "corpus", "--name", "mine/c",
                        "--source", source], capture_output=True, text=True, cwd=corpus / "inner",
                       env={**os.environ, **box.env}, timeout=TIMEOUT)
    assert p.returncode == 0 and "mine/c:v1" in p.stdout, p.stderr
    shown = run_jobs(box.store, "show", "mine/c:latest", env=box.env)
    assert shown.code == 0, shown.err
    assert "\x1b" not in shown.out and "\x07" not in shown.out, shown.out
    assert "odd\\x1b[2Jname.txt" in shown.out and "c\\x1b]0;owned\\x07" in shown.out, shown.out
    assert "train.txt" in shown.out
