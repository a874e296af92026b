"""Fixtures shared by every test: a store on a shell-hostile path, and a store the data stage filled."""
from __future__ import annotations

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
