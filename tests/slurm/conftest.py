"""The real dev Slurm cluster, started once per test session by the project's own script."""
import subprocess
from pathlib import Path

import pytest

UP = Path(__file__).parents[2] / "dev" / "slurm" / "up.sh"


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    p = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"dev/slurm/up.sh failed:\n{p.stdout}\n{p.stderr}"
