"""The tree passes the pinned ruff with pyproject.toml's rules (`[tool.ruff]`), and the same command
fails on a file with a finding. Cheap: ruff reads the tree in well under a second."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")   # dev/setup.sh installs it with the other dev tools


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    assert RUFF.exists(), f"{RUFF} is missing: run dev/setup.sh"
    return subprocess.run([str(RUFF), "check", "--no-cache", *args], cwd=cwd, capture_output=True, text=True)


def test_the_tree_is_clean():
    r = ruff(".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_finding_fails_the_check(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "planted.py").write_text("import os\n")
    r = ruff("planted.py", cwd=tmp_path)
    assert r.returncode == 1 and "F401" in r.stdout, r.stdout + r.stderr
