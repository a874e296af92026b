"""`jobs containers`: list, pin (atomic lock edit), import named by digest, with real registries and
Charliecloud: the dev set-up's image (dev/containers/image.sh), and small images pushed here to a
registry of the test's own."""
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from helpers import JOBS, run_jobs
from jobs import containers
from jobs.errors import ExecutorError

LOCK = Path(__file__).parents[2] / "containers" / "containers.lock"
DEV = Path(os.environ.get("JOBS_DEV_DIR", "/var/lib/jobs-dev"))   # dev/containers/env.sh
DEV_LOCK = DEV / "containers.lock"
TOOLS = {"/usr/bin/ch-image": "charliecloud-builders", "/usr/bin/ch-run": "charliecloud",
         "/usr/bin/docker-registry": "docker-registry", "/usr/bin/skopeo": "skopeo"}


@pytest.fixture
def lock(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "containers.lock"
    shutil.copy(LOCK, copy)
    import containers as pins  # the lock reader the command and the stages share

    monkeypatch.setattr(pins, "LOCK", copy)
    monkeypatch.delenv("JOBS_CONTAINERS_LOCK", raising=False)
    return copy


def test_pin_writes_the_digest_and_keeps_the_rest(lock):
    before = lock.read_text()
    image = containers.pin("nemo-rl", "sha256:" + "ef" * 32)
    assert image.pinned and image.reference == "nvcr.io/nvidia/nemo-rl@sha256:" + "ef" * 32
    after = lock.read_text()
    assert [x for x in before.splitlines() if "digest" not in x] == [x for x in after.splitlines() if "digest" not in x]
    assert containers.load_lock()["nemo"].image == containers.load_lock(LOCK)["nemo"].image
    with pytest.raises(ExecutorError, match="bad digest"):
        containers.pin("nemo", "sha256:beef")
    with pytest.raises(ExecutorError, match="not in"):
        containers.pin("nope", "sha256:" + "ef" * 32)


def test_a_machine_lock_overrides_the_committed_one_and_pin_writes_only_it(lock, tmp_path, monkeypatch):
    mine = tmp_path / "dev.lock"
    monkeypatch.setenv("JOBS_CONTAINERS_LOCK", str(mine))
    before = lock.read_text()
    image = containers.pin("tiny-cpu", "sha256:" + "12" * 32, image="127.0.0.1:5443/jobs/tiny-cpu:0.1")
    assert image.reference == "127.0.0.1:5443/jobs/tiny-cpu@sha256:" + "12" * 32
    assert lock.read_text() == before          # the committed lock is never touched
    containers.pin("tiny-cpu", "sha256:" + "34" * 32)   # a rebuild: only the digest line changes
    merged = containers.load_lock()
    assert merged["tiny-cpu"].reference == "127.0.0.1:5443/jobs/tiny-cpu@sha256:" + "34" * 32
    assert merged["nemo"].libraries == containers.load_lock(lock)["nemo"].libraries   # the rest stays
    assert containers.resolve("tiny-cpu").digest == "sha256:" + "34" * 32
    with pytest.raises(ExecutorError, match="bad image"):
        containers.pin("tiny-cpu", "sha256:" + "34" * 32, image="a b")
    # An image of the machine's own (a CPU twin), which the committed lock lacks: only with its reference,
    # and only into the machine's lock.
    with pytest.raises(ExecutorError, match="'twin-x' is not in"):
        containers.pin("twin-x", "sha256:" + "56" * 32)
    containers.pin("twin-x", "sha256:" + "56" * 32, image="127.0.0.1:5443/jobs/twin-x:1")
    assert containers.resolve("twin-x").reference == "127.0.0.1:5443/jobs/twin-x@sha256:" + "56" * 32
    assert lock.read_text() == before
    monkeypatch.delenv("JOBS_CONTAINERS_LOCK")
    with pytest.raises(ExecutorError, match="'twin-y' is not in"):
        containers.pin("twin-y", "sha256:" + "56" * 32, image="127.0.0.1:5443/jobs/twin-y:1")


def test_import_is_named_by_digest_never_by_tag(lock):
    containers.pin("nemo", "sha256:" + "ab" * 32)
    image = containers.resolve("nemo")
    (mkdir, cmd) = containers.import_commands(image, Path("/sqsh"), srun=True)
    out = cmd[cmd.index("--output") + 1]
    assert out == f"/sqsh/nvcr.io+nvidia+nemo@sha256_{image.digest[7:]}.sqsh" and "nemotron_3_nano" not in out
    assert cmd[0] == "srun" and cmd[-1] == f"docker://nvcr.io#nvidia/nemo@{image.digest}"
    with pytest.raises(ExecutorError, match="not pinned"):
        containers.squashfs_name(containers.load_lock()["nemo-rl"])
    local = containers.Image("x", "127.0.0.1:5443/jobs/x:1", "sha256:" + "ab" * 32)
    assert ":" not in containers.squashfs_name(local)      # mount lists split on ':'


def test_cli_list_and_errors(tmp_path):
    r = run_jobs(tmp_path / "s", "containers", "list")
    assert r.code == 0 and "nemo " in r.out and "NOT PINNED" in r.out
    for args, msg in ((["pin", "nemo", "--digest", "sha256:xyz"], "bad digest"),
                      (["pin", "nemo"], "pass the digest"),
                      (["import", "nosuch", "--dry-run"], "not in"),
                      (["import", "nemo"], "not pinned"),
                      (["import", "nemo", "--runtime", "charliecloud", "--dry-run"], "not pinned")):
        r = run_jobs(tmp_path / "s", "containers", *args, env={"JOBS_CONTAINERS_LOCK": ""})
        assert r.code == 2 and msg in r.err and len(r.err.strip().splitlines()) == 1
    mine = {"JOBS_CONTAINERS_LOCK": str(tmp_path / "mine.lock")}
    assert run_jobs(tmp_path / "s", "containers", "pin", "nemo", "--digest", "sha256:" + "ab" * 32, env=mine).code == 0
    for args, msg in ((["import", "nemo", "--dir", str(tmp_path / "sq")], "enroot is not installed"),
                      (["import", "nemo", "--runtime", "charliecloud", "--srun"], "go with --runtime pyxis")):
        r = run_jobs(tmp_path / "s", "containers", *args, env=mine)
        assert r.code == 2 and msg in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert not list((tmp_path / "sq").glob("*.sqsh"))


# --- real registries and Charliecloud ------------------------------------------------------------

def _need_tools():
    missing = [pkg for tool, pkg in TOOLS.items() if not Path(tool).exists()]
    if missing or not (DEV / "ca" / "registry.crt").is_file():
        pytest.fail(f"the container set-up is missing ({', '.join(missing) or 'the dev CA'}): "
                    "run dev/system_packages.sh and dev/containers/registry.sh (dev/test.sh does)")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry of this module's own (Debian's docker-registry) on a free port, with the dev CA's
    certificate for 127.0.0.1, which the set-up made every client trust."""
    _need_tools()
    root = tmp_path_factory.mktemp("registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'storage'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', tls: {{certificate: {DEV / 'ca/registry.crt'}, key: {DEV / 'ca/registry.key'}}}}}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                            stdout=open(root / "log", "w"), stderr=subprocess.STDOUT)
    addr = f"127.0.0.1:{port}"
    for _ in range(100):
        if subprocess.run(["curl", "-fsS", f"https://{addr}/v2/"], capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"docker-registry did not start: {(root / 'log').read_text()[-500:]}")
    yield addr, root / "storage"
    proc.terminate()
    proc.wait()


def push(tmp_path: Path, ref: str, files: dict[str, bytes]) -> str:
    """A one-layer image of `files`, pushed with skopeo; the manifest digest the registry took."""
    tar = tmp_path / f"{secrets.token_hex(4)}.tar"
    src = tmp_path / tar.stem
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    with tarfile.open(tar, "w") as t:
        t.add(src, arcname=".")
    digest_file = tmp_path / f"{tar.stem}.digest"
    subprocess.run(["skopeo", "copy", "-q", "--digestfile", str(digest_file), f"tarball:{tar}", f"docker://{ref}"],
                   check=True)
    return digest_file.read_text().strip()


def blob(storage: Path, digest: str) -> Path:
    hex_ = digest.split(":", 1)[1]
    return storage / "docker/registry/v2/blobs/sha256" / hex_[:2] / hex_ / "data"


def machine_lock(tmp_path: Path, ref: str, digest: str) -> dict:
    lock = tmp_path / f"lock-{digest[7:15]}.yml"
    r = run_jobs(tmp_path / "s", "containers", "pin", "tiny-cpu", "--digest", digest, "--image", ref,
                 env={"JOBS_CONTAINERS_LOCK": str(lock)})
    assert r.code == 0, r.err
    return {"JOBS_CONTAINERS_LOCK": str(lock)}


def test_two_imports_of_one_digest_at_once_make_one_squashfs(registry, tmp_path):
    addr, _ = registry
    payload = secrets.token_bytes(4 << 20)      # a new digest every run: nothing cached anywhere
    digest = push(tmp_path, f"{addr}/t/one:1", {"etc/payload": payload, "etc/hello": b"hi\n"})
    env = {**os.environ, **machine_lock(tmp_path, f"{addr}/t/one:1", digest)}
    out = tmp_path / "sqsh"
    cmd = [JOBS, "containers", "import", "tiny-cpu",
           "--runtime", "charliecloud", "--dir", str(out)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    assert [rc for rc, _, _ in results] == [0, 0], results
    said = sorted("imported" if "imported " in o else "reused" for _, o, _ in results)
    assert said == ["imported", "reused"], results       # one pulled and converted, the other waited
    sqsh = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert [p.name for p in sqsh] == [containers.squashfs_name(containers.Image("t", f"{addr}/t/one:1", digest))]
    assert [p.name for p in out.iterdir() if p.is_dir()] == []          # no pull left behind
    got = subprocess.run(["unsquashfs", "-cat", str(sqsh[0]), "etc/payload"], capture_output=True, check=True).stdout
    assert got == payload


@pytest.mark.parametrize("what", ["manifest", "layer"])
def test_a_registry_serving_other_bytes_for_the_pinned_digest_is_refused(registry, tmp_path, what):
    addr, storage = registry
    ref = f"{addr}/t/{what}:1"
    good = push(tmp_path, ref, {"etc/which": b"the pinned image\n" + secrets.token_bytes(64)})
    other = push(tmp_path, f"{addr}/t/{what}:2", {"etc/which": b"another image\n" + secrets.token_bytes(64)})
    if what == "manifest":    # the registry answers the pinned digest with another image's manifest
        shutil.copy(blob(storage, other), blob(storage, good))
    else:                     # the right manifest, another layer's bytes under its layer digest
        import json

        layer = lambda d: json.loads(blob(storage, d).read_bytes())["layers"][0]["digest"]
        shutil.copy(blob(storage, layer(other)), blob(storage, layer(good)))
    env = machine_lock(tmp_path, ref, good)
    r = run_jobs(tmp_path / "s", "containers", "import", "tiny-cpu", "--runtime", "charliecloud",
                 "--dir", str(tmp_path / "sqsh"), env=env)
    assert r.code == 2 and "served other bytes" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert [p.name for p in (tmp_path / "sqsh").iterdir() if not p.name.endswith(".lock")] == []


def test_the_set_up_image_is_pinned_imported_and_lacks_our_runtime():
    """dev/containers/image.sh built it: Debian's Python with the stages' libraries at the .venv's
    versions, pushed to the dev registry, pinned in the machine's lock, imported by digest."""
    _need_tools()
    assert DEV_LOCK.is_file(), f"{DEV_LOCK} is missing: run dev/containers/image.sh (dev/test.sh does)"
    env = {"JOBS_CONTAINERS_LOCK": str(DEV_LOCK)}
    image = containers.load_lock(DEV_LOCK)["tiny-cpu"]
    assert image.pinned and image.image.startswith("127.0.0.1:")
    assert containers.load_lock(LOCK)["tiny-cpu"].digest != image.digest    # the committed lock stays as it is
    served = subprocess.run(["skopeo", "inspect", "--format", "{{.Digest}}", f"docker://{image.reference}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert served == image.digest
    r = run_jobs(DEV / "no-store", "containers", "import", "tiny-cpu", "--runtime", "charliecloud",
                 "--dir", str(DEV / "sqsh"), env=env)
    assert r.code == 0 and "already holds" in r.out, r.err
    sqsh = DEV / "sqsh" / containers.squashfs_name(image)
    from importlib.metadata import version

    probe = ("import sys, torch, transformers, numpy, ray; "
             "print(sys.executable, torch.__version__, transformers.__version__, numpy.__version__, ray.__version__)")
    run = lambda code: subprocess.run(["ch-run", str(sqsh), "--", "python3", "-c", code], capture_output=True,
                                      text=True, env={**os.environ, "USER": os.environ.get("USER", "root"),
                                                      "PATH": "/usr/bin:/bin"}, timeout=300)
    inside = run(probe)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["/usr/bin/python3", version("torch"), version("transformers"), version("numpy"),
                                     version("ray")]
    for module in ("submitit", "hydra", "omegaconf", "cloudpickle", "jobs"):
        missing = run(f"import {module}")
        assert missing.returncode != 0 and "No module named" in missing.stderr, module


def test_a_pinned_index_admits_only_the_manifests_it_lists(tmp_path):
    """Pinned by a multi-arch index digest: ch-image fetches the index, then the node's manifest;
    the manifest must be one the pinned index lists."""
    import hashlib
    import json

    sha = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
    layer, config = b"layer bytes", b'{"architecture": "amd64"}'
    manifest = json.dumps({"config": {"digest": sha(config)}, "layers": [{"digest": sha(layer)}]}).encode()

    def dlcache(listed: str) -> tuple[Path, containers.Image]:
        d = tmp_path / secrets.token_hex(4)
        d.mkdir()
        index = json.dumps({"manifests": [{"digest": listed, "platform": {"architecture": "amd64"}}]}).encode()
        (d / "r%x.fat.json").write_bytes(index)
        (d / "r%x%skinny.manifest.json").write_bytes(manifest)
        (d / f"{sha(config)[7:]}.json").write_bytes(config)
        (d / f"{sha(layer)[7:]}.tar.gz").write_bytes(layer)
        return d, containers.Image("x", "127.0.0.1:1/x:1", sha(index))

    containers.check_pulled(*dlcache(sha(manifest)))
    with pytest.raises(ExecutorError, match="served other bytes"):
        containers.check_pulled(*dlcache("sha256:" + "0" * 64))
