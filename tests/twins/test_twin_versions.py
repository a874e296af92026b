"""The twin holds the nemo-rl image's versions: every library the job's path imports there is at the
version of NeMo RL 823fcc904's uv.lock (the image's own lock), read from the lock, not restated; the
only exceptions are the stand-ins dev/twin_standins.txt lists (torch: a CPU build)."""
from __future__ import annotations

import re
import subprocess
import sys

from twin import LOCK, PY, ROOT, VENV, require

require()
TOOL = ROOT / "dev" / "twin_lock.py"
sys.path.insert(0, str(TOOL.parent))


def check(lock) -> subprocess.CompletedProcess:
    names = VENV.joinpath("packages.txt").read_text().split()
    return subprocess.run([sys.executable, str(TOOL), "check", str(lock), str(PY), *names], capture_output=True, text=True)


def test_every_library_the_twin_was_built_with_is_at_the_images_lock_version():
    r = check(LOCK)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ray" in VENV.joinpath("packages.txt").read_text().split()[0]


def test_a_twin_library_at_another_version_than_the_lock_is_named(tmp_path):
    text = LOCK.read_text()
    planted, n = re.subn(r'(name = "ray"\nversion = ")2\.49\.2"', r'\g<1>2.52.0"', text)
    assert n == 1
    (tmp_path / "uv.lock").write_text(planted)
    r = check(tmp_path / "uv.lock")
    assert r.returncode == 1
    assert r.stdout.strip() == "ray: the twin has 2.49.2, the image's lock 2.52.0"


def test_the_only_libraries_at_another_version_are_the_listed_stand_ins():
    from twin_lock import installed, versions

    held = versions(LOCK.read_text())
    rows = [line.split(maxsplit=2) for line in (ROOT / "dev/twin_standins.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert rows
    have = installed(str(PY), [name for name, _, _ in rows])
    for name, version, _why in rows:
        assert have[name] == version and version not in held[name], (name, have[name], held.get(name))
