"""Fault injection on the store: hostile names, planted links and FIFOs, tampered artifacts, damaged
records, a garbage index, racing creators.

Every bad input or damaged file must give exit 2 (1 for `verify` with findings), one line on stderr,
no traceback, a store whose files did not change, and nothing written or chmodded outside it. The
store is made once from the testchain recipe (no models), then cloned per case.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from helpers import run_jobs, tree_state
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
HERE = Path(__file__).parent


def jobs_env(cache: Path) -> dict:
    return {"JOBS_RECIPES": os.pathsep.join([str(FIXTURES / "recipes"), str(HERE / "recipes")]),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), str(HERE), os.environ.get("PYTHONPATH", "")]),
            "JOBS_CACHE_DIR": str(cache)}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """count -> double on the test stages: two runs, three artifacts (a code snapshot and two results)."""
    root = tmp_path_factory.mktemp("base") / "store"
    r = run_jobs(root, "submit", "testchain", "--stage", "count,double", "count.steps=2", "count.step_s=0",
                 env=jobs_env(root.parent / "cache"))
    assert r.code == 0, r.err
    return root


def clone(src: Path, dst: Path) -> None:
    """A copy whose artifact records point at the copy's own files (records hold absolute paths)."""
    shutil.copytree(src, dst, symlinks=True)
    old, new = json.dumps(str(src))[1:-1].encode(), json.dumps(str(dst))[1:-1].encode()
    for p in dst.rglob("*.json"):
        if "records" in p.parts or "refs" in p.parts:
            p.write_bytes(p.read_bytes().replace(old, new))


@dataclass
class World:
    store: Path
    outside: Path      # files an attacker points at; must keep their bytes and modes
    cache: Path
    count_run: str
    double_run: str
    count_art: str
    double_art: str

    def art_dir(self, art: str) -> Path:
        return Path(Store(self.store).artifact(art)["path"])

    def record(self, kind: str, ident: str) -> Path:
        return Store(self.store)._path(kind, ident)

    def event(self, run: str) -> Path:
        folder = self.store / "records" / "event" / run[-2:] / run
        return sorted(folder.iterdir())[-1]

    def ref(self, name: str) -> Path:
        return sorted((self.store / "refs" / name).iterdir())[-1]


@pytest.fixture
def world(base, tmp_path, monkeypatch) -> World:
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))  # this process and the CLI share one cache
    store = tmp_path / "store"
    clone(base, store)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("not yours\n")
    os.chmod(outside / "victim.txt", 0o664)
    (outside / "ref").mkdir(parents=True)
    (outside / "ref" / "v000001.json").write_text(json.dumps({"artifact": "art_" + "0" * 64, "time": 1}))
    s = Store(store)
    runs = {r["stage"]: r["id"] for r in s.index().runs()}
    w = World(store, outside, tmp_path / "cache", runs["count"], runs["double"],
              s.run(runs["count"]).outputs["result"], s.run(runs["double"]).outputs["result"])
    shutil.rmtree(w.cache)  # the CLI reads every record afresh, as on a host that never indexed this store
    return w


def writable(p: Path) -> None:
    os.chmod(p, stat.S_IMODE(p.lstat().st_mode) | stat.S_IWUSR)


def tamper_same_size_same_mtime(w: World) -> list[str]:
    """The edit the old (inode, size, mtime) stat cache accepted: same size, mtime set back."""
    d = w.art_dir(w.count_art)
    f = d / "result.json"
    Store(w.store).verify(w.count_art)  # warm the stat cache first, as a real store would be
    st = f.stat()
    writable(f)
    data = f.read_bytes()
    f.write_bytes(data.replace(b"2", b"9", 1))
    os.chmod(f, stat.S_IMODE(st.st_mode))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    return ["verify", w.count_art[:12]]


def plant_in_artifact(kind: str) -> Callable[[World], list[str]]:
    def setup(w: World) -> list[str]:
        d = w.art_dir(w.count_art)
        writable(d)
        if kind == "fifo":
            os.mkfifo(d / "planted")
        elif kind == "symlink":
            os.symlink(w.outside / "victim.txt", d / "planted")
        elif kind == "dirlink":
            os.symlink(w.outside, d / "planted")
        os.chmod(d, 0o555)
        return ["verify", "--all"]
    return setup


def delete_artifact(w: World) -> list[str]:
    d = w.art_dir(w.double_art)
    writable(d)
    (d / "result.json").unlink()
    os.chmod(d, 0o555)
    return ["verify", "testchain/double/result:latest"]


def overwrite(path_of: Callable[[World], Path], data: bytes) -> Callable[[World], None]:
    def damage(w: World) -> None:
        p = path_of(w)
        p.write_bytes(data)
    return damage


def fifo_at(path_of: Callable[[World], Path]) -> Callable[[World], None]:
    def damage(w: World) -> None:
        p = path_of(w)
        p.unlink()
        os.mkfifo(p)
    return damage


def truncate(path_of: Callable[[World], Path]) -> Callable[[World], None]:
    def damage(w: World) -> None:
        p = path_of(w)
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    return damage


def reshape(path_of: Callable[[World], Path], change: Callable[[dict], None]) -> Callable[[World], None]:
    def damage(w: World) -> None:
        p = path_of(w)
        obj = json.loads(p.read_bytes())
        change(obj)
        p.write_text(json.dumps(obj))
    return damage


def garbage_index(w: World) -> None:
    s = Store(w.store)
    s.index()
    (s.cache / "index.sqlite").write_bytes(b"this is not SQLite" * 100)


RUN_REC = lambda w: w.record("run", w.count_run)           # noqa: E731
ART_REC = lambda w: w.record("artifact", w.double_art)     # noqa: E731
EVENT = lambda w: w.event(w.double_run)                    # noqa: E731
REF = lambda w: w.ref("testchain/double/result")            # noqa: E731


@dataclass
class Case:
    id: str
    args: Callable[[World], list[str]]
    code: int
    says: str                                   # in stderr (exit 2) or stdout (verify findings, exit 1)
    damage: Callable[[World], None] | None = None


def a(*args: str) -> Callable[[World], list[str]]:
    return lambda w: [x.format(w=w) for x in args]


CASES = [
    # -- names stay inside the store ------------------------------------------------------------
    Case("alias-absolute", a("show", "/etc/passwd:latest"), 2, "bad artifact name"),
    Case("alias-dotdot", a("show", "../../outside/ref:latest"), 2, "bad artifact name"),
    Case("alias-dotdot-inner", a("lineage", "testchain/../../outside/ref:v1"), 2, "bad artifact name"),
    Case("alias-uppercase", a("verify", "Testchain/count/result:latest"), 2, "bad artifact name"),
    Case("alias-newline", a("show", "testchain/count\nresult:latest"), 2, "bad artifact name"),
    Case("alias-bad-tag", a("show", "testchain/count/result:v-1"), 2, "bad alias"),
    Case("input-alias-dotdot", a("submit", "testchain", "--stage", "double", "--input", "numbers=../../outside/ref:v1"),
         2, "bad artifact name"),
    Case("art-id-garbage", a("show", "art_zzzz1234"), 2, "bad artifact ID"),
    Case("art-id-glob", a("show", "art_00*"), 2, "bad artifact ID"),
    Case("run-id-percent", a("show", "%"), 2, "bad run ID"),
    Case("run-id-underscore", a("show", "_"), 2, "bad run ID"),
    Case("pin-percent", a("pin", "%"), 2, "bad run ID"),
    Case("logs-percent", a("logs", "0%"), 2, "bad run ID"),
    Case("diff-percent", a("diff", "%", "%"), 2, "bad run ID"),
    Case("export-name-dotdot", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside), "--name", "../escaped"],
         2, "bad --name", damage=lambda w: (w.outside / ".dvc").mkdir()),
    Case("export-name-absolute", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside), "--name", "/tmp/x"],
         2, "bad --name", damage=lambda w: (w.outside / ".dvc").mkdir()),
    Case("export-dvc-missing", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside / "nope")], 2, "no such folder"),
    Case("export-not-dvc", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside)], 2, "not a DVC repository"),
    Case("export-out-missing-folder", lambda w: ["export", w.count_run, "--openlineage", "--out",
                                                 str(w.outside / "no" / "such" / "file.jsonl")], 2, "does not exist"),
    Case("export-out-is-folder", lambda w: ["export", w.count_run, "--openlineage", "--out", str(w.outside)], 2, "is a folder"),
    Case("export-through-gitignore-link", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside / "repo")],
         2, "symbolic link", damage=lambda w: ((w.outside / "repo" / ".dvc").mkdir(parents=True),
                                               (w.outside / "repo" / ".gitignore").symlink_to(w.outside / "victim.txt"))),
    Case("export-dest-is-a-link", lambda w: ["export", w.count_art[:12], "--dvc", str(w.outside / "repo"), "--name", "x"],
         2, "exists already", damage=lambda w: ((w.outside / "repo" / ".dvc").mkdir(parents=True),
                                                (w.outside / "repo" / "x").symlink_to(w.outside / "gone"))),
    Case("ref-folder-links-outside", a("show", "testchain/evil:v1"), 2, "leads outside the store",
         damage=lambda w: (w.store / "refs" / "testchain" / "evil").symlink_to(w.outside / "ref")),
    Case("gc-negative-age", a("gc", "--older-than", "-1"), 2, "--older-than"),
    Case("gc-nan-age", a("gc", "--older-than", "nan"), 2, "--older-than"),
    # -- tampered artifacts: verify says so, in one finding per artifact --------------------------
    Case("tamper-same-size-same-mtime", tamper_same_size_same_mtime, 1, "changed result.json"),
    Case("fifo-in-artifact", plant_in_artifact("fifo"), 1, "planted is a FIFO"),
    Case("symlink-in-artifact", plant_in_artifact("symlink"), 1, "planted is a symbolic link"),
    Case("dirlink-in-artifact", plant_in_artifact("dirlink"), 1, "planted is a symbolic link"),
    Case("artifact-files-deleted", delete_artifact, 1, "missing result.json"),
    Case("tampered-input-refused-at-submit", a("submit", "testchain", "--stage", "double", "--force",
                                                "--input", "numbers={w.count_art}"), 2, "result.json",
         damage=tamper_same_size_same_mtime),
    # -- a damaged store is a diagnosis -----------------------------------------------------------
    Case("truncated-event-list", a("list"), 2, "damaged store file", damage=truncate(EVENT)),
    Case("truncated-event-show", a("show", "{w.double_run}"), 2, "damaged store file", damage=truncate(EVENT)),
    Case("garbage-run-record-list", a("list"), 2, "damaged store file", damage=overwrite(RUN_REC, b"\x00\xffgarbage")),
    Case("garbage-run-record-show", a("show", "{w.count_run}"), 2, "damaged store file",
         damage=overwrite(RUN_REC, b"\x00\xffgarbage")),
    Case("run-record-wrong-shape", a("status", "--all"), 2, "'recipe' is missing",
         damage=reshape(RUN_REC, lambda o: o.pop("recipe"))),
    Case("run-record-moved", a("show", "{w.count_run}"), 2, "damaged store file",
         damage=reshape(RUN_REC, lambda o: o.update(id="0" * 8))),
    Case("event-wrong-shape", a("show", "{w.double_run}"), 2, "damaged store file",
         damage=reshape(EVENT, lambda o: o.update(time="yesterday"))),
    Case("empty-artifact-record-show", a("show", "{w.double_art}"), 2, "damaged store file", damage=overwrite(ART_REC, b"")),
    Case("empty-artifact-record-artifacts", a("artifacts"), 2, "damaged store file", damage=overwrite(ART_REC, b"")),
    Case("empty-artifact-record-verify-all", a("verify", "--all"), 1, "damaged store file", damage=overwrite(ART_REC, b"")),
    Case("manifest-entry-wrong-shape", a("verify", "{w.double_art}"), 1, "manifest entry",
         damage=reshape(ART_REC, lambda o: o["manifest"][0].pop("digest"))),
    Case("garbage-ref-show", a("show", "testchain/double/result:latest"), 2, "damaged store file",
         damage=overwrite(REF, b"{\"artifact\": 12")),
    Case("ref-not-an-artifact-id", a("lineage", "testchain/double/result:latest"), 2, "is not an artifact ID",
         damage=reshape(REF, lambda o: o.update(artifact="../../../etc/passwd"))),
    Case("garbage-ref-verify-all", a("verify", "--all"), 1, "damaged store file", damage=overwrite(REF, b"nonsense")),
    Case("fifo-as-run-record", a("list"), 2, "not a regular file", damage=fifo_at(RUN_REC)),
    Case("fifo-as-ref", a("show", "testchain/double/result:latest"), 2, "not a regular file", damage=fifo_at(REF)),
    Case("garbage-index-list", a("list"), 2, "damaged index", damage=garbage_index),
    Case("garbage-index-show", a("show", "{w.count_run}"), 2, "index --rebuild", damage=garbage_index),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault_is_one_line_and_changes_nothing(world, case):
    if case.damage:
        case.damage(world)
    args = case.args(world)
    store_before = tree_state(world.store)
    outside_before = tree_state(world.outside)
    r = run_jobs(world.store, *args, env=jobs_env(world.cache), timeout=120)
    assert r.code == case.code, (r.out, r.err)
    assert "Traceback" not in r.err + r.out
    if case.code == 2:
        assert len(r.err.splitlines()) == 1 and r.err.startswith("jobs: error: "), r.err
        assert case.says in r.err, r.err
    else:  # verify's findings: one CORRUPT line naming the file, nothing on stderr
        assert r.err == "", r.err
        findings = [line for line in r.out.splitlines() if line.startswith("CORRUPT")]
        assert len(findings) == 1 and case.says in findings[0], r.out
    assert tree_state(world.store) == store_before
    assert tree_state(world.outside) == outside_before


# ---- registration never follows links or touches anything outside the artifact ----------------
PLANTS = ["symlink", "dirlink", "fifo", "socket", "hardlink"]


@pytest.mark.parametrize("what", PLANTS)
def test_stage_output_with_a_link_or_special_file_is_refused_and_nothing_outside_changes(tmp_path, monkeypatch, what):
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("not yours\n")
    os.chmod(victim, 0o664)
    target = outside if what == "dirlink" else victim
    before = tree_state(outside)
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "hostile", "--stage", "plant", f"plant.what={what}", f"plant.target={target}",
                 env=jobs_env(tmp_path / "cache"), timeout=300)
    assert r.code == 1, (r.out, r.err)
    assert "Traceback" not in r.out + r.err
    assert stat.S_IMODE(victim.stat().st_mode) == 0o664 and tree_state(outside) == before
    s = Store(store)
    (run,) = s.index().runs()
    view = s.run(run["id"])
    assert view.state == "FAILED" and "\n" not in view.reason
    assert "planted is a" in view.reason and "cannot register" in view.reason, view.reason
    # Nothing was made read-only: the check ran before the first chmod.
    out = s.run_dir(run["id"]) / "outputs" / "result"
    assert (out / "ok.txt").stat().st_mode & stat.S_IWUSR
    assert [a["kind"] for a in s.index().artifacts()] == ["code"]       # no output artifact was recorded
    shown = run_jobs(store, "show", run["id"], env=jobs_env(tmp_path / "cache"))
    assert shown.code == 0 and "FAILED" in shown.out


# ---- damage that is repaired -------------------------------------------------------------------
def test_index_rebuild_replaces_a_garbage_index(world):
    garbage_index(world)
    env = jobs_env(world.cache)
    assert run_jobs(world.store, "list", env=env).code == 2
    r = run_jobs(world.store, "index", "--rebuild", env=env)
    assert r.code == 0 and "rebuilt" in r.out, r.err
    listing = run_jobs(world.store, "list", env=env)
    assert listing.code == 0 and world.count_run in listing.out


def test_tampered_artifact_is_healed_by_rerunning_its_producer(world):
    env = jobs_env(world.cache)
    tamper_same_size_same_mtime(world)
    old_path = world.art_dir(world.count_art)
    assert run_jobs(world.store, "verify", "testchain/count/result:latest", env=env).code == 1
    shown = run_jobs(world.store, "show", "testchain/count/result:latest", env=env)
    assert shown.code == 0 and "verified  CORRUPT" in shown.out      # :latest never silently looks fine
    again = run_jobs(world.store, "submit", "testchain", "--stage", "count", "count.steps=2", "count.step_s=0",
                     "--force", env=env)
    assert again.code == 0, again.err
    s = Store(world.store)
    newest = s.index().runs(stage="count")[0]["id"]
    assert s.run(newest).outputs["result"] == world.count_art        # same bytes, same ID
    healed = s.artifact(world.count_art)
    assert Path(healed["path"]) != old_path and healed["first_path"] == str(old_path)
    s.verify(world.count_art)
    assert s.resolve_verified("testchain/count/result:latest") == world.count_art
    assert run_jobs(world.store, "verify", "--all", env=env).code == 0
    # The record of the artifact is untouched; the healing is one appended location record.
    assert len(list((world.store / "records" / "location").rglob("*.json"))) == 1


def test_reproduce_is_bit_for_bit_only_when_both_sides_verify(world):
    env = jobs_env(world.cache)
    from jobs.reproduce import compare

    s = Store(world.store)
    old = s.run(world.count_run)
    ok = compare(s, old, old)
    assert ok.identical and not ok.corrupt
    tamper_same_size_same_mtime(world)
    bad = compare(s, old, old)
    assert not bad.identical and "changed result.json" in bad.corrupt[0]
    # A real reproduction re-creates the recorded bytes, so it heals the artifact and then verifies.
    r = run_jobs(world.store, "reproduce", world.count_run, env=env)
    assert r.code == 0 and "reproduced bit for bit" in r.out, (r.out, r.err)
    s.verify(world.count_art)


# ---- read commands on a read-only store ---------------------------------------------------------
def test_read_commands_work_on_a_read_only_store(world):
    env = jobs_env(world.cache)
    before = tree_state(world.store)
    subprocess.run(["mount", "--bind", str(world.store), str(world.store)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(world.store)], check=True)
        results = {cmd: run_jobs(world.store, *args, env=env) for cmd, args in {
            "list": ["list"], "status": ["status", "--all"], "show": ["show", world.count_run],
            "artifacts": ["artifacts"], "lineage": ["lineage", "testchain/double/result:latest"],
            "verify": ["verify", "--all"], "show-art": ["show", world.double_art[:12]]}.items()}
        pin = run_jobs(world.store, "pin", world.count_run, env=env)
    finally:
        subprocess.run(["umount", str(world.store)], check=True)
    for cmd, r in results.items():
        assert r.code == 0 and r.err == "", (cmd, r.err)
    assert pin.code == 2 and len(pin.err.splitlines()) == 1 and "Traceback" not in pin.err
    assert tree_state(world.store) == before


# ---- store creation races ------------------------------------------------------------------------
RACER = textwrap.dedent("""
    import sys, time
    from lineage import Store
    from lineage.errors import LineageError
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    try:
        Store.open(sys.argv[1], create=True).create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
    except LineageError as e:
        print(e)
        sys.exit(2)
""")


def test_racing_first_submits_both_create_the_store(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    failures = []
    for i in range(10):
        root = tmp_path / f"s{i}"
        start = time.time() + 0.4
        procs = [subprocess.Popen([sys.executable, "-c", RACER, str(root), str(start)], stdout=subprocess.PIPE, text=True)
                 for _ in range(3)]
        for p in procs:
            out, _ = p.communicate(timeout=60)
            if p.returncode:
                failures.append(out)
        assert len(Store(root).index().runs()) == len(procs) - len(failures)
    assert failures == []
