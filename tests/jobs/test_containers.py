"""`jobs containers`: list, pin (atomic lock edit), import commands named by digest."""
import shutil
from pathlib import Path

import pytest

from helpers import run_jobs
from jobs import containers
from jobs.errors import ExecutorError

LOCK = Path(__file__).parents[2] / "containers" / "containers.lock"


@pytest.fixture
def lock(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "containers.lock"
    shutil.copy(LOCK, copy)
    import containers as pins  # the lock reader the command and the stages share

    monkeypatch.setattr(pins, "LOCK", copy)
    return copy


def test_pin_writes_the_digest_and_keeps_the_rest(lock):
    before = lock.read_text()
    image = containers.pin("nemo-rl", "sha256:" + "ef" * 32)
    assert image.pinned and image.reference == "nvcr.io/nvidia/nemo-rl@sha256:" + "ef" * 32
    after = lock.read_text()
    assert [l for l in before.splitlines() if "digest" not in l] == [l for l in after.splitlines() if "digest" not in l]
    assert containers.load_lock()["nemo"].image == containers.load_lock(LOCK)["nemo"].image
    with pytest.raises(ExecutorError, match="bad digest"):
        containers.pin("nemo", "sha256:beef")
    with pytest.raises(ExecutorError, match="not in"):
        containers.pin("nope", "sha256:" + "ef" * 32)


def test_import_is_named_by_digest_never_by_tag(lock):
    containers.pin("nemo", "sha256:" + "ab" * 32)
    image = containers.resolve("nemo")
    (mkdir, cmd) = containers.import_commands(image, Path("/sqsh"), srun=True)
    out = cmd[cmd.index("--output") + 1]
    assert out == f"/sqsh/nvcr.io+nvidia+nemo@sha256_{image.digest[7:]}.sqsh" and "nemotron_3_nano" not in out
    assert cmd[0] == "srun" and cmd[-1] == f"docker://nvcr.io#nvidia/nemo@{image.digest}"
    with pytest.raises(ExecutorError, match="not pinned"):
        containers.squashfs_name(containers.load_lock()["nemo-rl"])


def test_cli_list_and_errors(tmp_path):
    r = run_jobs(tmp_path / "s", "containers", "list")
    assert r.code == 0 and "nemo " in r.out and "NOT PINNED" in r.out
    for args, msg in ((["pin", "nemo", "--digest", "sha256:xyz"], "bad digest"),
                      (["pin", "nemo"], "pass the digest"),
                      (["import", "nosuch", "--dry-run"], "not in"),
                      (["import", "nemo"], "not pinned")):
        r = run_jobs(tmp_path / "s", "containers", *args)
        assert r.code == 2 and msg in r.err and len(r.err.strip().splitlines()) == 1
