"""Fixtures shared by every test: a store on a shell-hostile path, and a store the data stage filled."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import run_jobs


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    """A folder whose name breaks naive shell quoting."""
    d = tmp_path / "we ird $(touch owned) 'q\" dir"
    d.mkdir()
    return d


@pytest.fixture
def store_path(hostile_dir: Path) -> Path:
    return hostile_dir / "store"


@pytest.fixture(scope="session")
def data_store(tmp_path_factory) -> Path:
    """A store in which the tiny data stage ran once, through the real CLI; shared by read-only tests."""
    root = tmp_path_factory.mktemp("data store") / "store"
    r = run_jobs(root, "submit", "tiny", "--stage", "data")
    assert r.code == 0, r.err
    return root


# --- two workers (dev/test.sh runs pytest-xdist with -n 2) -------------------------------------------
# Most of the suite waits on one single-threaded `jobs` process or on Slurm, so a second worker fills
# the idle core. Some tests must share a worker, and the scheduler sees only test IDs, so a test's
# group follows from its ID: the tests reading the tiny pipeline (PIPELINE: one build of the session
# fixture), every test under tests/slurm/ (the dev cluster's two nodes: a test that counts pending
# reasons, nodes or requeues must not see another test's jobs), and otherwise each module (its module
# fixtures are built once). The two long groups go first, one to each worker. Collection checks that
# a test using the pipeline or the cluster sits where its group says.
PIPELINE = ("tests/stages/test_pipeline.py", "tests/stages/test_rl.py", "tests/stages/test_rm.py",
            "tests/stages/test_rl_pieces.py")
FIRST = ("pipeline", "slurm")


def group_of(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path.startswith("tests/slurm/"):
        return "slurm"
    return "pipeline" if path in PIPELINE else path


def pytest_collection_modifyitems(config, items):
    misplaced = [item.nodeid for item in items
                 if "pipeline" in item.fixturenames and group_of(item.nodeid) != "pipeline"
                 or (item.get_closest_marker("slurm") or "slurm_cluster" in item.fixturenames)
                 and group_of(item.nodeid) != "slurm"]
    if misplaced:
        raise pytest.UsageError("tests/conftest.py: these tests use the tiny pipeline or the Slurm cluster but "
                                "their file is not in that group (PIPELINE, tests/slurm/): " + ", ".join(misplaced))
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(FIRST)))   # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True, optionalhook=True)   # before xdist's own choice of scheduler
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


#: Where the set-up has run (dev/test.sh, hence CI), a skipped test is a failure: every library,
#: venv, package and privilege a test needs is the set-up's to provide, so a skip there means a test
#: that did not run while the run looked green. Elsewhere (a developer's partial checkout) a skip says why.
NO_SKIP = any(os.environ.get(v, "").lower() not in ("", "0", "false") for v in ("CI", "JOBS_NO_SKIP"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_SKIP and report.skipped:
        if hasattr(report, "wasxfail"):
            what = f"expected to fail ({report.wasxfail})"
            del report.wasxfail
        else:
            what = "skipped: " + (report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr))
        report.outcome = "failed"
        report.longrepr = f"{what}, where no test may be ({'CI' if os.environ.get('CI') else 'JOBS_NO_SKIP'} set)"
