"""Fault injection for a store a team shares: secrets, `jobs add`, reads that must not block, odd input.

Every case runs the real `jobs` command on a copy of a store where testchain's count stage ran,
and must give the expected exit (2 for bad input, with exactly one `jobs: error:` line on stderr;
0 for a read that must simply not hang), no traceback, a store whose files did not change, and
nothing written outside it (a sandboxed HOME, working folder and an `outside` folder are hashed
before and after). The cases are counted in one summary at the end of the module. Then the
promises end to end: secrets by value, the version `jobs add` made under concurrency, identical
content added once, a failed add that leaves nothing, a report that marks a tampered eval.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from helpers import count_once, run_jobs, tree_state
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
TIMEOUT = 120    # a case that hangs on a FIFO fails here instead of hanging the suite


def base_env(tmp: Path) -> dict:
    return {"HOME": str(tmp / "home"), "JOBS_CACHE_DIR": str(tmp / "cache"), "MPLCONFIGDIR": str(tmp / "cache" / "mpl"),
            "JOBS_RECIPES": os.pathsep.join([str(tmp / "recipes"), str(FIXTURES / "recipes")]),
            "PYTHONPATH": os.pathsep.join([str(tmp / "mods"), str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


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
    procs: list = field(default_factory=list)

    @property
    def outside(self) -> Path:
        return self.tmp / "outside"

    def run_id(self) -> str:
        (run,) = [r["id"] for r in Store(self.store).index().runs(stage="count")]
        return run

    def run_dir(self, run: str | None = None) -> Path:
        return self.store / "runs" / (run or self.run_id())

    def count_art(self) -> Path:
        s = Store(self.store)
        return Path(s.artifact(s.run(self.run_id()).outputs["result"])["path"])

    def folder(self, *files: str) -> Path:
        """A folder of the user's, outside the store, holding `files`."""
        d = self.outside / "mine"
        d.mkdir(exist_ok=True)
        for f in files:
            (d / f).write_text(f"{f}\n")
        return d

    def sleeper(self) -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "300"], start_new_session=True)
        self.procs.append(p)
        return p

    def running_run(self, **attempt) -> str:
        """A RUNNING local run whose attempt records `attempt`."""
        s = Store(self.store)
        run = s.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": "local", "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
        s.add_event(run, "attempt", attempt=1, start=time.time(), **attempt)
        s.add_event(run, "status", state="RUNNING")
        return run


@pytest.fixture
def box(tmp_path, monkeypatch, counted) -> Box:
    for d in ("home", "cwd", "recipes", "mods", "cache", "outside"):
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "store"
    shutil.copytree(counted, store, symlinks=True)
    b = Box(tmp_path, store, base_env(tmp_path))
    yield b
    for p in b.procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def ident(pid: int) -> dict:
    from runtime.attempts import boot_id, proc_start

    return {"host": socket.gethostname(), "pid": pid, "pgid": os.getpgid(pid), "proc_start": proc_start(pid),
            "boot_id": boot_id()}


def writable(p: Path) -> None:
    p.chmod(p.stat().st_mode | 0o200)


def tamper_count(b: Box) -> None:
    f = b.count_art() / "result.json"
    writable(f)
    f.write_text(f.read_text().replace('"steps": 2', '"steps": 3'))


# ---- the cases -------------------------------------------------------------------------------
@dataclass
class Case:
    id: str
    item: str                                   # which promise: secrets, add, reads, errors, cancel
    prepare: Callable[[Box], list[str]]         # -> the command's arguments
    message: str                                # in the one stderr line (exit 2)
    code: int = 2
    store: Callable[[Box], Path] | None = None  # another store path (one that must not come to exist)
    after: Callable[[Box], None] | None = None


def add_case(id: str, item: str, plant: Callable[[Path], None], message: str, new_store: bool = False,
             extra: tuple = ()) -> Case:
    def prepare(b: Box) -> list[str]:
        d = b.folder("ok.txt")
        plant(d)
        return ["add", str(d), "--kind", "count-result", "--name", "mine/data", *extra]
    return Case(id, item, prepare, message, store=(lambda b: b.tmp / "new-store") if new_store else None)


def fifo(name: str) -> Callable[[Path], None]:
    return lambda d: os.mkfifo(d / name)


def device(name: str, minor: int) -> Callable[[Path], None]:
    """A character device node 1:minor (1:5 reads zeros forever, 1:3 is empty), as only root can make."""
    def plant(d: Path) -> None:
        try:
            os.mknod(d / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        except PermissionError:
            pytest.skip("making a device node needs root")
    return plant


def non_utf8_file(d: Path) -> None:
    (d / os.fsdecode(b"bad\xffname")).write_text("x")


def fifo_log(b: Box) -> list[str]:
    run = b.run_id()
    log = next((b.run_dir(run) / "logs").glob("*_0_log.out"))
    log.unlink()
    os.mkfifo(log)
    return ["logs", run]


def fifo_progress(b: Box) -> list[str]:
    p = b.sleeper()
    run = b.running_run(**ident(p.pid))
    d = b.run_dir(run)
    d.mkdir(parents=True, exist_ok=True)   # the store makes the run's folder with its record
    os.mkfifo(d / "progress.json")
    os.mkfifo(d / "metrics.jsonl")
    return ["status"]


def keep(name: str, content: bytes | None) -> Callable[[Box], list[str]]:
    """A file (or a FIFO, for None) among the run's kept training snapshots."""
    def prepare(b: Box) -> list[str]:
        d = b.run_dir() / "checkpoints" / "keep"
        d.mkdir(parents=True, exist_ok=True)
        if content is None:
            os.mkfifo(d / name)
        else:
            (d / name).write_bytes(content)
        return ["gc", "--keep-top-k", "1", "--metric", "count/loss", "--yes"]
    return prepare


def metric_named(name: str) -> Callable[[Box], list[str]]:
    def prepare(b: Box) -> list[str]:
        m = b.run_dir() / "metrics.jsonl"
        rows = [{"step": i, name: 1.0 / (i + 1), "time": 0.0} for i in range(5)]
        m.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return ["report", b.run_id(), "--out", str(b.outside / "r.html")]
    return prepare


def report_has(text: str) -> Callable[[Box], None]:
    def check(b: Box) -> None:
        page = (b.outside / "r.html").read_text()
        assert text in page
        (b.outside / "r.html").unlink()   # the report is the one file this command may write outside
    return check


def forged_cancel(b: Box) -> list[str]:
    p = b.sleeper()
    return ["cancel", b.running_run(**ident(p.pid))]


def sleeper_alive(b: Box) -> None:
    assert b.procs[-1].poll() is None, "cancel signalled a process that was not the run's"


def tampered_dry_run(b: Box) -> list[str]:
    tamper_count(b)
    return ["submit", "testchain", "--stage", "double", "--dry-run"]


def ref_folder_is_a_file(b: Box) -> list[str]:
    (b.store / "refs" / "mine").mkdir(parents=True)
    (b.store / "refs" / "mine" / "data").write_text("not a folder\n")
    return ["add", str(b.folder("ok.txt")), "--kind", "count-result", "--name", "mine/data/x"]


BIG = str(2**64)
DEEP = "+count.deep=" + "{a:" * 500 + "1" + "}" * 500

CASES = [
    # 4. secrets: a literal placeholder is never a reference (the job must not read $HOME for it)
    Case("literal placeholder is not a reference", "secrets",
         lambda b: ["submit", "testchain", "--stage", "count", "+count.note='<redacted: from $NO_SUCH_TOKEN>'",
                    "--dry-run"], "", code=0),
    # 5. jobs add: names, refusals that leave nothing, not even a new store
    Case("add name shaped like a version file", "add",
         lambda b: ["add", str(b.folder("ok.txt")), "--kind", "count-result", "--name", "coll/x/v000002.json"],
         "a word shaped like a version file"),
    Case("add name collides with an existing version", "add",
         lambda b: ["add", str(b.folder("ok.txt")), "--kind", "count-result",
                    "--name", "testchain/count/result/v000001.json"], "bad artifact name"),
    Case("add where a name's folder is a file", "add", ref_folder_is_a_file, "where the folder of name mine/data belongs"),
    add_case("add refused creates no store", "add", lambda d: None, "no stage reads that kind", new_store=True,
             extra=("--kind", "no-such-kind")),
    add_case("add fifo inside, new store", "add", fifo("pipe"), "pipe is a FIFO", new_store=True),
    # 6. devices refused, reads never block
    add_case("add /dev/zero-like node", "reads", device("zero", 5), "zero is a device node"),
    add_case("add /dev/null-like node", "reads", device("null", 3), "null is a device node"),
    Case("logs of a FIFO", "reads", fifo_log, "is not a regular file"),
    Case("status with FIFO progress and metrics", "reads", fifo_progress, "", code=0,
         after=lambda b: b.procs[-1].poll() is None or pytest.fail("sleeper died")),
    Case("gc keep-top-k FIFO snapshot", "reads", keep("count-step3.json", None), "not a regular file"),
    # 7. one-line errors
    Case("revision not UTF-8", "errors",
         lambda b: ["add", str(b.folder("ok.txt")), "--kind", "count-result", "--name", "mine/data",
                    "--revision", os.fsdecode(b"r\xfe1")], "is not valid UTF-8"),
    add_case("file name not UTF-8", "errors", non_utf8_file, "is not valid UTF-8"),
    Case("store path not UTF-8", "errors", lambda b: ["list"], "is not valid UTF-8",
         store=lambda b: b.tmp / os.fsdecode(b"st\xffore")),
    Case("list limit beyond SQLite", "errors", lambda b: ["list", "--limit", BIG], "--limit must be at most"),
    Case("status limit beyond SQLite", "errors", lambda b: ["status", "--limit", BIG], "--limit must be at most"),
    Case("metric name read as mathtext", "errors", metric_named(r"count/$\frac{x$"), "", code=0,
         after=report_has(r"count/$\frac{x$")),
    Case("gc keep-top-k garbage JSON", "errors", keep("count-step3.json", b"\x00\xffgarbage"), "damaged store file"),
    Case("gc keep-top-k garbage name", "errors", keep("whatever.json", b"{}"), "not named <series>-step<N>.json"),
    Case("gc keep-top-k metrics not a mapping", "errors", keep("count-step3.json", b'{"metrics": 5}'),
         "'metrics' is not a mapping"),
    Case("500-deep nested override", "errors", lambda b: ["submit", "testchain", "--stage", "count", DEEP],
         "nested 500 levels deep"),
    Case("NaN config value", "errors", lambda b: ["submit", "testchain", "--stage", "count", "count.steps=nan"],
         "no NaN or Infinity"),
    Case("Infinity config value", "errors", lambda b: ["submit", "testchain", "--stage", "count", "+count.x=-inf"],
         "no NaN or Infinity"),
    Case("dry run verifies inputs", "errors", tampered_dry_run, "changed result.json"),
    # 8. cancel: every /proc fact copied into a forged record, but the process is not the run's
    Case("cancel forged identity", "cancel", forged_cancel, "does not carry run", after=sleeper_alive),
]

RESULTS: list[dict] = []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault_is_one_line_and_changes_nothing(case: Case, box: Box):
    args = case.prepare(box)
    store = case.store(box) if case.store else box.store
    Store(box.store).index()          # a read command may sync the index (in the per-host cache, not the store)
    before = tree_state(store)
    outside = [tree_state(box.tmp / d) for d in ("home", "cwd", "outside")]
    r = run_jobs(store, *args, env=box.env, timeout=TIMEOUT)
    if case.after:
        case.after(box)
    result = {"case": case.id, "item": case.item, "code": case.code, "code_ok": r.code == case.code,
              "traceback": "Traceback" in r.err + r.out,
              "one_line": len(r.err.strip().splitlines()) == 1 and r.err.startswith("jobs: error: ")
              and case.message in r.err if case.code == 2 else r.err == "",
              "store_changed": tree_state(store) != before,
              "outside_written": [tree_state(box.tmp / d) for d in ("home", "cwd", "outside")] != outside}
    RESULTS.append(result)
    if os.environ.get("SHOW_FAULTS"):
        print(f"\n{case.id}: {r.code} {r.err.strip()}")
    assert result["code_ok"], (r.code, r.out, r.err)
    assert not result["traceback"], r.err
    assert result["one_line"], r.err
    assert not result["store_changed"], "the store changed on an error"
    assert not result["outside_written"], "something was written outside"


# ---- the promises end to end ------------------------------------------------------------------
PROBE = textwrap.dedent("""
    import json, os
    def run(ctx):
        out = ctx.output_dir('result')
        cfg = ctx.config['probe']
        got = {'pin': type(cfg['pin']) is int and cfg['pin'] == int(os.environ['PIN_PASSWORD']),
               'url': cfg['url'] == 'https://bot:' + os.environ['DB_PASSWORD'] + '@db.example/x',
               'literal': cfg['literal'], 'escaped': cfg['escaped'], 'steps': cfg['steps']}
        (out / 'got.json').write_text(json.dumps(got, sort_keys=True))
        return {'result': out}
""")


def test_secrets_are_redacted_by_value_and_a_literal_placeholder_stays_literal(box):
    import random

    # Random, so the code snapshot of this file cannot hold them; a 9-digit PIN and a 7-character
    # password are never found in a store's timestamps and digests by chance.
    rng = random.Random(os.urandom(8))
    pin = str(rng.randrange(10**8, 10**9))
    short = "%" + "".join(rng.choice("abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(5)) + "~"
    other = "value-of-other-" + os.urandom(4).hex()
    d = box.tmp / "recipes" / "probe"
    d.mkdir()
    (d / "recipe.yaml").write_text("name: probe\nstages:\n  probe:\n    module: secretprobe\n"
                                   "    outputs: {result: probe-result}\n    resources: {time_min: 5}\n")
    (d / "probe.yaml").write_text(textwrap.dedent("""
        probe:
          pin: ${oc.decode:${oc.env:PIN_PASSWORD}}
          url: https://bot:${oc.env:DB_PASSWORD}@db.example/x
          literal: '<redacted: from $OTHER_TOKEN>'
          escaped: '<redacted: from $$OTHER_TOKEN>'
          steps: 12
    """))
    (box.tmp / "mods" / "secretprobe.py").write_text(PROBE)
    env = {**box.env, "PIN_PASSWORD": pin, "DB_PASSWORD": short, "OTHER_TOKEN": other}
    r = run_jobs(box.store, "submit", "probe", "--stage", "probe", env=env)
    assert r.code == 0, r.err
    s = Store(box.store)
    (run,) = [x["id"] for x in s.index().runs(recipe="probe")]
    view = s.run(run)
    recorded = view.spec["config"]["probe"]
    assert recorded["pin"] == "<redacted: decoded from $PIN_PASSWORD>"
    assert recorded["url"] == "https://bot:<redacted: from $DB_PASSWORD>@db.example/x"
    assert recorded["steps"] == 12
    # The job got the real values back, the number as a number, and the user's literal text as text:
    got = json.loads((Path(s.artifact(view.outputs["result"])["path"]) / "got.json").read_text())
    assert got == {"pin": True, "url": True, "literal": "<redacted: from $OTHER_TOKEN>",
                   "escaped": "<redacted: from $$OTHER_TOKEN>", "steps": 12}
    # `jobs add --source` with a token in the URL: redacted in the artifact's metadata too.
    added = run_jobs(box.store, "add", str(box.folder("a.txt")), "--kind", "count-result", "--name", "mine/data",
                     "--source", f"https://u:{short}@host/repo", env=env)
    assert added.code == 0, added.err
    origin = Store(box.store).artifact(added.out.split()[0])["metadata"]["origin"]
    assert origin["source"] == "https://u:<redacted: from $DB_PASSWORD>@host/repo"
    for root in (box.store, box.tmp / "cache"):
        for dirpath, _, files in os.walk(root):
            for name in files:
                data = (Path(dirpath) / name).read_bytes()
                assert short.encode() not in data and pin.encode() not in data, Path(dirpath) / name
                assert other.encode() not in data, Path(dirpath) / name


ADDER = textwrap.dedent("""
    import sys, time
    start = float(sys.argv[3])
    while time.time() < start:
        pass
    from jobs.cli import main
    sys.exit(main(["--store", sys.argv[1], "add", sys.argv[2], "--kind", "count-result", "--name", "team/data"]))
""")


def test_concurrent_adds_each_print_the_version_they_made(box):
    folders = []
    for i in range(4):
        d = box.outside / f"part{i}"
        d.mkdir()
        (d / "rows.txt").write_text(f"part {i}\n")
        folders.append(d)
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(box.store), str(d), str(start)],
                              env={**os.environ, **box.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d in folders]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    s = Store(box.store)
    printed = {}
    for d, (out, _) in zip(folders, outs):
        art, _, version = out.split()[:3]
        printed[version] = d
        assert s.resolve_artifact(version) == art               # the printed :vN is this add's artifact
        files = Path(s.artifact(art)["path"])
        assert (files / "rows.txt").read_text() == (d / "rows.txt").read_text()
    assert sorted(printed) == [f"team/data:v{i}" for i in range(1, 5)]


def test_identical_content_adds_no_copy_and_no_version(box):
    d = box.folder("a.txt", "b.txt")
    first = run_jobs(box.store, "add", str(d), "--kind", "count-result", "--name", "mine/data", env=box.env)
    assert first.code == 0, first.err
    before = tree_state(box.store)
    again = run_jobs(box.store, "add", str(d), "--kind", "count-result", "--name", "mine/data", env=box.env)
    assert again.code == 0 and "mine/data:v1 already holds these bytes: nothing added" in again.out, again.out
    assert tree_state(box.store) == before
    other = run_jobs(box.store, "add", str(d), "--kind", "count-result", "--name", "theirs/data", env=box.env)
    assert other.code == 0 and "theirs/data:v1" in other.out and "no second copy" in other.out, other.out
    assert len(list((box.store / "imports").iterdir())) == 1
    s = Store(box.store)
    assert s.resolve_artifact("theirs/data:latest") == s.resolve_artifact("mine/data:latest")


def test_a_failed_add_leaves_nothing_behind(box, monkeypatch):
    """The disk fills while the copy is registered: no copy in imports/, no record, no name."""
    import errno

    from jobs.add import add
    from lineage.store import Store as RealStore

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RealStore, "register", full)
    for k, v in box.env.items():
        monkeypatch.setenv(k, v)
    before = tree_state(box.store)
    with pytest.raises(OSError):
        add(box.store, str(box.folder("a.txt")), "count-result", "mine/data")
    assert tree_state(box.store) == before
    fresh = box.tmp / "fresh-store"
    with pytest.raises(OSError):
        add(fresh, str(box.folder("a.txt")), "count-result", "mine/data")
    assert not fresh.exists()                 # the store this add created is gone again


def test_report_marks_a_tampered_eval_report_corrupt(box):
    d = box.tmp / "recipes" / "evalprobe"
    d.mkdir()
    (d / "recipe.yaml").write_text("name: evalprobe\nstages:\n  ev:\n    module: evalprobe\n"
                                   "    outputs: {report: eval-report}\n    resources: {time_min: 5}\n")
    (d / "ev.yaml").write_text("ev: {}\n")
    (box.tmp / "mods" / "evalprobe.py").write_text(textwrap.dedent("""
        import json
        def run(ctx):
            out = ctx.output_dir('report')
            (out / 'results.json').write_text(json.dumps({'accuracy': 0.25}))
            return {'report': out}
    """))
    assert run_jobs(box.store, "submit", "evalprobe", "--stage", "ev", env=box.env).code == 0
    s = Store(box.store)
    (run,) = [x["id"] for x in s.index().runs(recipe="evalprobe")]
    page = box.outside / "r.html"
    clean = run_jobs(box.store, "report", run, "--out", str(page), env=box.env)
    assert clean.code == 0, clean.err
    assert "CORRUPT" not in page.read_text() and "<td>ok</td>" in page.read_text()
    f = Path(s.artifact(s.run(run).outputs["report"])["path"]) / "results.json"
    writable(f)
    f.write_text(json.dumps({"accuracy": 0.99}))
    r = run_jobs(box.store, "report", run, "--out", str(page), env=box.env)
    assert r.code == 0, r.err
    text = page.read_text()
    row = next(line for line in text.split("<tr") if "0.99" in line and "evalprobe/ev/report" in line)
    assert "CORRUPT" in row and "changed results.json" in row, row
    shown = run_jobs(box.store, "show", "evalprobe/ev/report:latest", env=box.env)
    assert "verified  CORRUPT" in shown.out


def test_summary(request):
    """One count over the cases above, as the other fault suites report them."""
    if len(RESULTS) < len(CASES):
        pytest.skip("the summary needs every case of this module to have run")
    clean = [r for r in RESULTS if r["one_line"] and r["code_ok"]]
    summary = {"cases": len(RESULTS), "clean one-line errors": sum(r["code"] == 2 for r in clean),
               "clean reads (exit 0, stderr empty)": sum(r["code"] == 0 for r in clean),
               "tracebacks": sum(r["traceback"] for r in RESULTS),
               "store changes on error": sum(r["store_changed"] for r in RESULTS),
               "writes outside": sum(r["outside_written"] for r in RESULTS)}
    items = sorted({r["item"] for r in RESULTS})
    print("\nteam store faults: " + ", ".join(f"{k} {v}" for k, v in summary.items()) + f" (items: {', '.join(items)})")
    assert summary["tracebacks"] == summary["store changes on error"] == summary["writes outside"] == 0
    assert len(clean) == len(CASES)
    assert set(items) == {"secrets", "add", "reads", "errors", "cancel"}


TRICKY = ["<redacted: from $X>", "<redacted: from $$X>", "<redacted: from $$$X>", "<redacted: from $",
          "<redacted: decoded from $PIN_PASSWORD>", "a<redacted: from $<redacted: from $X>>b", "$$", "",
          "pw=s3cr3t;<redacted: from $DB_KEY>", "<redacted: from s3cr3t$X>", "s3cr3ts3cr3t", "0.1", "12345"]


@pytest.mark.parametrize("text", TRICKY)
def test_redaction_round_trips_and_never_records_a_secret(text):
    """Whatever the user wrote comes back to the job exactly, and no secret's value is recorded."""
    from lineage.secrets import redact, unredact

    env = {"DB_KEY": "s3cr3t", "PIN_PASSWORD": "12345", "X": "must-not-be-read", "TOKENIZERS_PARALLELISM": "true"}
    config = {"text": text, "n": 12345, "f": 0.5, "flag": True, "list": [text, 12345.0]}
    recorded = redact(config, env)
    assert "s3cr3t" not in json.dumps(recorded) and "12345" not in json.dumps(recorded)
    back = unredact(recorded, env)
    assert back["text"] == text and back["list"][0] == text and back["n"] == 12345 and back["f"] == 0.5
    assert "must-not-be-read" not in json.dumps(back)
