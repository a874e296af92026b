"""What a container job brings into a foreign image: the runtime bundle (submitit and what it imports,
pure Python, content-addressed in the store), runtime.bootstrap (USR2 held, the bundle appended after
the image's packages), and runtime.image's one-line verdict on what the stage needs from the image.
The image-free checks use Debian's own /usr/bin/python3 with no site-packages: an interpreter that,
like NVIDIA's images, has none of this project's dependencies."""
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import bundle
from jobs.errors import JobsError
from lineage import hashing
from runtime import image

ROOT = Path(__file__).resolve().parents[2]
BARE = "/usr/bin/python3"   # Debian's python3: no submitit, no cloudpickle, no torch


def bare(code: str, *paths: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `code` in an isolated interpreter (-I -S: no site-packages, no PYTHONPATH) with `paths` first."""
    prelude = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n"
    return subprocess.run([BARE, "-I", "-S", "-c", prelude + code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


needs_bare = pytest.mark.skipif(not Path(BARE).exists() or bare("import submitit").returncode == 0,
                                reason="needs an interpreter without submitit")


def test_the_bundle_is_submitit_and_its_requirements_pure_python_and_content_addressed(tmp_path):
    b = bundle.collect()
    assert set(b.packages) == {"submitit", "cloudpickle", "typing_extensions"}
    assert not [f for f in b.files if f.endswith(bundle.COMPILED)] and not [f for f in b.files if "__pycache__" in f]
    folder = bundle.store(b, tmp_path)
    assert folder == tmp_path / "runtime" / b.digest.split(":", 1)[1]
    # Its name is the digest of what it holds, and it cannot be changed in place.
    assert "sha256:" + hashing.artifact_id(hashing.manifest(folder)).removeprefix("art_") == b.digest
    assert not any(os.stat(p).st_mode & stat.S_IWUSR for p in [folder, *folder.rglob("*")])
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    assert bundle.store(bundle.collect(), tmp_path) == folder          # a second submit writes nothing
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before


def test_a_distribution_that_is_not_installed_is_refused_in_one_line():
    with pytest.raises(JobsError, match="needs no-such-dist-here, which is not installed"):
        bundle.collect(("no-such-dist-here",))


@needs_bare
def test_the_job_imports_from_the_code_and_the_bundle_alone(tmp_path):
    """What submitit unpickles and the entry imports, in an interpreter that has nothing else."""
    folder = bundle.store(bundle.collect(), tmp_path)
    without = bare("import runtime.entry", ROOT)
    assert without.returncode != 0 and "No module named 'submitit'" in without.stderr
    code = ("import submitit.core._submit, runtime.entry, runtime.ray_cluster, lineage.store, stages.contract\n"
            "import stages.data, stages.pretrain, stages.sft, stages.rm, stages.rl, stages.eval, stages.export\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'yaml', 'numpy', 'hydra')))")
    r = bare(code, ROOT, folder)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"   # the stages import their libraries when they run, from the image


@needs_bare
def test_bootstrap_appends_the_bundle_after_the_images_own_packages(tmp_path):
    """An image that has its own typing_extensions keeps it: the bundle only fills what is missing."""
    folder = bundle.store(bundle.collect(), tmp_path / "store")
    own = tmp_path / "site"
    own.mkdir()
    import typing_extensions

    (own / "typing_extensions.py").write_text(Path(typing_extensions.__file__).read_text() + "\nIMAGES_OWN = True\n")
    code = ("import runpy; sys.argv = ['x', '-m', 'show']\n"
            "runpy.run_module('runtime.bootstrap', run_name='__main__')")
    (tmp_path / "show.py").write_text("import typing_extensions, submitit; print(getattr(typing_extensions, 'IMAGES_OWN', False), "
                                      "submitit.__file__.startswith(%r))\n" % str(folder))
    r = bare(code, ROOT, own, tmp_path, env={"JOBS_RUNTIME_BUNDLE": str(folder)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    r = bare(code, ROOT, tmp_path, env={"JOBS_RUNTIME_BUNDLE": str(tmp_path / "nowhere")})
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
        "jobs: cannot start: submitit, cloudpickle, typing_extensions not in the image nor in the runtime bundle")


def test_usr2_inherited_ignored_from_ch_runs_wrapper_is_still_held_and_delivered(tmp_path):
    """The Charliecloud command starts the job with USR2 ignored (so that ch-run, the squashfs's FUSE
    server, survives it); an early USR2 must still reach submitit's handler once it exists."""
    (tmp_path / "late.py").write_text(
        "import signal, time\nprint('started', flush=True)\ntime.sleep(1.5)\n"
        "signal.signal(signal.SIGUSR2, lambda *a: print('handled USR2', flush=True))\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})\nprint('done', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    p = subprocess.Popen(["sh", "-c", 'trap "" USR2; exec "$@"', "sh", sys.executable, "-u", "-m", "runtime.hold_usr2",
                          "-u", "-m", "late"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.2)
    os.kill(p.pid, signal.SIGUSR2)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.split("\n")[:2] == ["handled USR2", "done"]


def spec(stage: str, module: str | None = None, ray: bool = False, **config) -> dict:
    return {"stage": stage, "module": module or f"stages.{stage}", "ray": ray, "config": config}


TRACKING = {"wandb": "offline", "tensorboard": True}


def test_what_each_tiny_stage_needs_from_its_image_follows_its_config():
    assert set(image.needs(spec("data"))) == {"tokenizers", "transformers"}
    assert {"torch", "transformers", "wandb", "tensorboard"} <= set(image.needs(spec("pretrain", tracking=TRACKING)))
    assert "wandb" not in image.needs(spec("sft", tracking={"wandb": "disabled", "tensorboard": False}))
    rl = image.needs(spec("rl", ray=True, rl={"generation": {"backend": "vllm"}}))
    assert rl["ray"] == "stage rl runs on Ray" and rl["vllm"] == "rl.generation.backend=vllm"
    assert "vllm" not in image.needs(spec("eval", eval={"backend": "hf"}))
    assert set(image.needs(spec("sft", sft={"backend": "megatron"}))) >= {"megatron.bridge", "torch"}
    assert set(image.needs(spec("rl", rl={"backend": "nemo_rl"}))) == {"nemo_rl"}


def test_a_missing_module_fails_the_stage_in_one_line_naming_it(monkeypatch):
    monkeypatch.setenv("JOBS_IMAGE", "reg/img@sha256:" + "ab" * 32)
    image.check_image(spec("pretrain", tracking={"wandb": "disabled"}))   # this environment has them all
    with pytest.raises(image.ImageLacks) as e:   # NeMo RL is in NVIDIA's image only
        image.check_image(spec("x", x={"backend": "nemo_rl"}))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == f"image reg/img@sha256:{'ab' * 32} lacks nemo_rl, which stage x imports (x.backend=nemo_rl)"
