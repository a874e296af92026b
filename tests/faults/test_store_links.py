"""Planted links in the store's own folders: the store never writes through one.

Anyone who may write the store root (everyone, on a team store) can replace `imports/`, `runs/`,
`code/`, `records/...` or a run's folder with a symbolic link to somewhere else. Every case runs the
real `jobs` command on a copy of a small finished store with one such link planted, and counts, as
the other fault suites do: cases, clean one-line errors (exit 2, one stderr line), tracebacks,
changes to the store on error, and writes or mode changes outside it (the link's target).
"""
from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from helpers import run_jobs, tree_state
from lineage import Store
from lineage.errors import Unsafe
from lineage.hashing import artifact_id, hash_file, normal_mode
from lineage.ids import fanout

FIXTURES = Path(__file__).parents[1] / "fixtures"
FAST = ["count.steps=2", "count.step_s=0"]


def env_for(cache: Path) -> dict:
    return {"JOBS_RECIPES": str(FIXTURES / "recipes"), "JOBS_CACHE_DIR": str(cache),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """count -> double, and one added file: runs/, code/, imports/, records/ and refs/ all exist."""
    tmp = tmp_path_factory.mktemp("links")
    root = tmp / "store"
    r = run_jobs(root, "submit", "testchain", "--stage", "count,double", *FAST, env=env_for(tmp / "cache"))
    assert r.code == 0, r.err
    (tmp / "numbers.json").write_text("[1, 2, 3]\n")
    r = run_jobs(root, "add", str(tmp / "numbers.json"), "--kind", "count-result", "--name", "testchain/extra",
                 env=env_for(tmp / "cache"))
    assert r.code == 0, r.err
    return root


@dataclass
class World:
    store: Path
    outside: Path       # where the planted links point: must keep every byte and mode
    files: Path         # what the cases add
    count_run: str


def plant(w: World, rel: str) -> None:
    """Move the store's folder `rel` to the outside and leave a link to it in its place: the link's
    target looks like the real folder, so a write through it would succeed silently."""
    real = w.store / rel
    target = w.outside / rel.replace("/", "_")
    if real.exists():
        shutil.move(str(real), target)
    else:
        target.mkdir()
    real.symlink_to(target)


@dataclass
class Case:
    id: str
    plant: Callable[[World], None]
    args: Callable[[World], list[str]]
    says: str


def link(rel: str) -> Callable[[World], None]:
    return lambda w: plant(w, rel)


def add_args(w: World) -> list[str]:
    return ["add", str(w.files / "more.json"), "--kind", "count-result", "--name", "testchain/more"]


def submit_args(w: World) -> list[str]:
    return ["submit", "testchain", "--stage", "count", "--force", *FAST]


def artifact_fan_of_the_add(w: World) -> None:
    """The add's artifact ID is known in advance (a hash of the content): link its record's folder."""
    f = w.files / "more.json"
    st = f.stat()
    art = artifact_id([{"path": f.name, "size": st.st_size, "digest": str(hash_file(f)), "mode": normal_mode(st.st_mode)}])
    plant(w, f"records/artifact/{fanout(art)}")


def run_folder_link(w: World) -> None:
    plant(w, f"runs/{w.count_run}")


def snapshot_link(w: World) -> None:
    """The code snapshot a submit of this checkout would reuse, swapped for a link to a copy of it."""
    (snap,) = os.listdir(w.store / "code")
    real = w.store / "code" / snap
    shutil.copytree(real, w.outside / "snapshot", symlinks=True)
    for dirpath, _, _ in os.walk(real):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(real)
    real.symlink_to(w.outside / "snapshot")


CASES = [
    Case("imports-link-add", link("imports"), add_args, "imports/ is a symbolic link"),
    Case("refs-link-add", link("refs"), add_args, "refs/ is a symbolic link"),
    Case("records-link-add", link("records"), add_args, "records/ is a symbolic link"),
    Case("artifact-fan-link-add", artifact_fan_of_the_add, add_args, "is a symbolic link"),
    Case("runs-link-submit", link("runs"), submit_args, "runs/ is a symbolic link"),
    Case("code-link-submit", link("code"), submit_args, "code/ is a symbolic link"),
    Case("snapshot-link-submit", snapshot_link, submit_args, "is a symbolic link"),
    Case("run-records-link-submit", link("records/run"), submit_args, "records/run/ is a symbolic link"),
    Case("event-records-link-submit", link("records/event"), submit_args, "records/event/ is a symbolic link"),
    Case("runs-link-gc", link("runs"), lambda w: ["gc", "--yes", "--older-than", "0"], "runs/ is a symbolic link"),
    Case("run-folder-link-logs", run_folder_link, lambda w: ["logs", w.count_run], "is a symbolic link"),
    Case("records-link-list", link("records"), lambda w: ["list"], "records/ is a symbolic link"),
]


@dataclass
class Outcome:
    case: str
    clean: bool           # exit 2, one line on stderr, saying what the case expects
    traceback: bool
    store_changed: bool
    outside_changed: bool
    detail: str


def run_case(case: Case, base: Path, tmp: Path) -> Outcome:
    w = World(tmp / "store", tmp / "outside", tmp / "files", "")
    shutil.copytree(base, w.store, symlinks=True)
    w.outside.mkdir()
    w.files.mkdir()
    (w.files / "more.json").write_text("[4, 5, 6]\n")
    w.count_run = next(r["id"] for r in Store(w.store).index().runs() if r["stage"] == "count")
    case.plant(w)
    cache = tmp / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    store_before, outside_before = tree_state(w.store), tree_state(w.outside)
    r = run_jobs(w.store, *case.args(w), env=env_for(cache), timeout=300)
    lines = r.err.splitlines()
    return Outcome(case.id,
                   clean=r.code == 2 and len(lines) == 1 and r.err.startswith("jobs: error: ") and case.says in r.err,
                   traceback="Traceback" in r.out + r.err,
                   store_changed=tree_state(w.store) != store_before,
                   outside_changed=tree_state(w.outside) != outside_before,
                   detail=f"exit {r.code}: {r.err.strip()[-300:]}")


def test_planted_links_are_refused_in_one_line_and_nothing_is_written_through_them(base, tmp_path):
    outcomes = []
    for i, case in enumerate(CASES):
        outcomes.append(run_case(case, base, tmp_path / str(i)))
    summary = {"cases": len(outcomes), "clean one-line errors": sum(o.clean for o in outcomes),
               "tracebacks": sum(o.traceback for o in outcomes),
               "store changes on error": sum(o.store_changed for o in outcomes),
               "writes outside": sum(o.outside_changed for o in outcomes)}
    print("store links:", ", ".join(f"{k} {v}" for k, v in summary.items()))
    bad = [o for o in outcomes if not o.clean or o.traceback or o.store_changed or o.outside_changed]
    assert summary == {"cases": len(CASES), "clean one-line errors": len(CASES), "tracebacks": 0,
                       "store changes on error": 0, "writes outside": 0}, bad


# ---- the store API: nothing below the root is followed when it writes ----------------------------
def test_registering_through_a_linked_folder_changes_nothing_outside(tmp_path, monkeypatch):
    """A run's `outputs/` swapped for a link after the stage wrote: register refuses, and the files
    the link points at keep their modes (they are not made read-only)."""
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    s = Store.open(tmp_path / "store", create=True)
    outside = tmp_path / "outside" / "model"
    outside.mkdir(parents=True)
    (outside / "w.bin").write_bytes(b"weights")
    before = tree_state(tmp_path / "outside")
    run_dir = s.run_dir("0190b3c5-0000-7000-8000-000000000001")
    run_dir.mkdir(parents=True)
    (run_dir / "outputs").symlink_to(outside.parent)
    with pytest.raises(Unsafe, match="outputs is a symbolic link"):
        s.register(run_dir / "outputs" / "model", kind="model")
    assert tree_state(tmp_path / "outside") == before
    assert stat.S_IMODE((outside / "w.bin").stat().st_mode) & stat.S_IWUSR
    assert not (s.root / "records" / "artifact").exists()


def test_a_new_run_is_refused_before_anything_is_written_when_its_record_folders_are_links(tmp_path, monkeypatch):
    """Run IDs are not predictable, so an attacker links every record folder a run could land in."""
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    s = Store.open(tmp_path / "store", create=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    for fan in (f"{i:02x}" for i in range(256)):
        (s.root / "records" / "event").mkdir(parents=True, exist_ok=True)
        (s.root / "records" / "event" / fan).symlink_to(outside)
    before, outside_before = tree_state(s.root), tree_state(outside)
    with pytest.raises(Unsafe, match="is a symbolic link"):
        s.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
    assert tree_state(s.root) == before and tree_state(outside) == outside_before


def test_a_run_folder_that_is_a_link_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBS_CACHE_DIR", str(tmp_path / "cache"))
    s = Store.open(tmp_path / "store", create=True)
    run = s.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}})
    assert s.run_dir(run).is_dir() and not s.run_dir(run).is_symlink()
    os.rmdir(s.root / "runs" / run)
    (s.root / "runs" / run).symlink_to(tmp_path)
    with pytest.raises(Unsafe, match=f"runs/{run} is a symbolic link"):
        s.run_dir(run)
