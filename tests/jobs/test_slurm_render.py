"""sbatch rendering is a pure function: pinned by golden files. Profiles and time parsing."""
import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

import containers as pins
from jobs import containers, profiles
from jobs.errors import ExecutorError
from jobs.executors import slurm
from jobs.executors.slurm import python_for, render, sbatch_params
from jobs.plan import StagePlan

GOLDEN = Path(__file__).parent / "golden"
def stage_plan(recipe: str, stage: str, container: str | None, resources: dict) -> StagePlan:
    return StagePlan(recipe=recipe, stage=stage, module=f"stages.{stage}", config={}, inputs={}, upstream={},
                     input_kinds={}, outputs={}, resources=resources, container=container, ray=False)


STAGE = stage_plan("nano3", "rl", "nemo-rl", {"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 64, "mem_gb": 1000,
                                              "time_min": 240})
IMAGE = containers.Image("nemo-rl", "nvcr.io/nvidia/nemo-rl:v0.4.0", "sha256:" + "ab" * 32)


def rendered(stage: StagePlan, profile: profiles.Profile, image) -> str:
    params = sbatch_params(stage, profile, Path("/lustre/store"), image, code_root=Path("/home/u/jobs"))
    return render(params, Path("/lustre/store/runs/RUN/logs"), python_for(image, here="/venv/bin/python"))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("JOBS_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), "rendering changed; if on purpose, rerun with JOBS_UPDATE_GOLDEN=1"


def test_gpu_stage_with_container_matches_golden():
    profile = profiles.Profile(name="gpu", partition="batch", account="llm", qos="high", exclusive=True,
                               sbatch={"mail-type": "END"}, srun_args=["--cpu-bind=none"],
                               container_mounts=["/data:/data"])
    text = rendered(STAGE, profile, IMAGE)
    assert "--container-image=nvcr.io#nvidia/nemo-rl@sha256:" + "ab" * 32 in text
    assert "--no-container-mount-home" in text and "#SBATCH --gpus-per-node=8" in text
    check_golden("nano3_rl.sbatch", text)


def test_cpu_stage_without_container_matches_golden():
    stage = stage_plan("tiny", "data", None, {"nodes": 1, "cpus_per_task": 1, "mem_gb": 2, "time_min": 10})
    text = rendered(stage, profiles.Profile(partition="debug", time="00:30:00"), None)
    assert "#SBATCH --time=30" in text and "container" not in text
    check_golden("tiny_data.sbatch", text)


def test_hostile_values_are_quoted():
    stage = replace(STAGE, stage="rl; touch /tmp/owned")
    profile = profiles.Profile(partition="a b", sbatch={"comment": "$(touch /tmp/owned)"})
    text = rendered(stage, profile, None)
    assert "#SBATCH --comment='$(touch /tmp/owned)'" in text
    assert "#SBATCH --job-name='nano3-rl; touch /tmp/owned'" in text
    assert "#SBATCH --partition='a b'" in text


@pytest.mark.parametrize("text,minutes", [("90", 90), ("01:30:00", 90), ("1-00", 1440), ("2-01:00:30", 2941),
                                          ("10:30", 11), (45, 45)])
def test_slurm_time_formats(text, minutes):
    assert profiles.minutes(text) == minutes


@pytest.mark.parametrize("text", ["abc", "0", "1:2:3:4", "-5"])
def test_bad_times_are_refused(text):
    with pytest.raises(ExecutorError):
        profiles.minutes(text)


def test_profiles_extend_and_refuse_unknown(tmp_path, monkeypatch):
    f = tmp_path / "profiles.yaml"
    f.write_text("base: {partition: debug, time: '01:00:00'}\n"
                 "big: {extends: base, nodes: 2, gpus_per_node: 8}\n"
                 "typo: {partitoin: x}\n"
                 "loop: {extends: loop}\n")
    monkeypatch.setenv("JOBS_PROFILES", str(f))
    big = profiles.load("big")
    assert (big.partition, big.nodes, big.gpus_per_node, big.time) == ("debug", 2, 8, "01:00:00")
    with pytest.raises(ExecutorError, match="unknown keys"):
        profiles.load("typo")
    with pytest.raises(ExecutorError, match="no profile 'nope'"):
        profiles.load("nope")
    with pytest.raises(ExecutorError, match="extends itself"):
        profiles.load("loop")
    assert profiles.load(None) == profiles.Profile()


def test_unpinned_images_are_refused_unless_allowed(tmp_path, monkeypatch):
    lock = tmp_path / "containers.lock"
    lock.write_text("a: {image: 'nvcr.io/nvidia/nemo:25.11', digest: null}\n"
                    f"b: {{image: 'nvcr.io/nvidia/nemo:25.11', digest: 'sha256:{'cd' * 32}'}}\n")
    monkeypatch.setattr(pins, "LOCK", lock)
    with pytest.raises(ExecutorError, match="not pinned by digest"):
        containers.resolve("a")
    assert containers.resolve("a", allow_unpinned=True).reference == "nvcr.io/nvidia/nemo:25.11"
    assert containers.resolve("b").reference == f"nvcr.io/nvidia/nemo@sha256:{'cd' * 32}"
    with pytest.raises(ExecutorError, match="not in"):
        containers.resolve("c")


HOSTILE = [
    ("store path", {}, {"store": Path("/lustre/st\nore")}, "store path"),
    ("partition", {"partition": "debug\necho owned"}, {}, "control character"),
    ("sbatch value", {"sbatch": {"comment": "x\n#SBATCH --uid=0"}}, {}, "control character"),
    ("sbatch key", {"sbatch": {"comment\nrm -rf ~": "x"}}, {}, "not an sbatch option"),
    ("unknown sbatch key", {"sbatch": {"nosuch": "x"}}, {}, "not an sbatch option"),
    ("owned sbatch key", {"sbatch": {"output": "/tmp/x"}}, {}, "not an sbatch option"),
    ("srun arg", {"srun_args": ["--cpu-bind=none\ntouch /tmp/owned"]}, {}, "control character"),
    ("container mount", {"container_mounts": ["/a:/a\r"]}, {"image": IMAGE}, "control character"),
    ("comma in a mounted store", {}, {"store": Path("/lustre/a,b"), "image": IMAGE}, "pyxis"),
    ("job name", {}, {"stage": replace(STAGE, stage="rl\nid")}, "control character"),
    ("bad resources", {}, {"stage": replace(STAGE, resources={"nodes": "abc"})}, "nodes must be an integer"),
    ("absurd resources", {}, {"stage": replace(STAGE, resources={"mem_gb": 1e30})}, "mem_gb must be a number"),
]


@pytest.mark.parametrize("profile_kw,where,message", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_nothing_with_a_control_character_or_unknown_key_reaches_a_script(profile_kw, where, message):
    with pytest.raises(ExecutorError, match=message) as e:
        sbatch_params(where.get("stage", STAGE), profiles.Profile(**profile_kw), where.get("store", Path("/lustre/store")),
                      where.get("image"), code_root=Path("/home/u/jobs"))
    assert "\n" not in str(e.value)


BAD_PROFILES = [
    ("nodes: abc", "nodes must be an integer"),
    ("nodes: -1", "nodes must be an integer"),
    ("gpus_per_node: 1000000", "gpus_per_node must be an integer"),
    ("mem_gb: .inf", "mem_gb must be a number"),
    ("time: '99999-00'", "more than a year"),
    ("exclusive: 'yes'", "exclusive must be true or false"),
    ("sbatch: {nosuch: 1}", "not an sbatch option"),
    ("sbatch: {wrap: 'rm -rf /'}", "set by the executor"),
    ("sbatch: {mail_type: [END]}", "must be a string"),
    ("container_mounts: ['/a:/b,/etc:/etc']", "no comma"),
    ('partition: "debug\\nid"', "control characters"),
    ("srun_args: '--cpu-bind=none'", "must be a list"),
]


@pytest.mark.parametrize("body,message", BAD_PROFILES, ids=[b for b, _ in BAD_PROFILES])
def test_bad_profile_values_are_one_line(tmp_path, monkeypatch, body, message):
    f = tmp_path / "profiles.yaml"
    f.write_text(f"p: {{{body}}}\n")
    monkeypatch.setenv("JOBS_PROFILES", str(f))
    with pytest.raises(ExecutorError, match=message) as e:
        profiles.load("p")
    assert "\n" not in str(e.value)


def test_good_profile_with_sbatch_options_loads(tmp_path, monkeypatch):
    f = tmp_path / "profiles.yaml"
    f.write_text("p: {partition: debug, sbatch: {mail-type: END, mail_user: a@b.c, requeue: true}, "
                 "container_mounts: ['/data:/data:ro'], srun_args: ['--cpu-bind=none']}\n")
    monkeypatch.setenv("JOBS_PROFILES", str(f))
    p = profiles.load("p")
    text = rendered(STAGE, p, IMAGE)
    assert "#SBATCH --mail-user=a@b.c" in text and "#SBATCH --requeue" in text and "/data:/data:ro" in text


# --- container jobs: what they bring into the image, and how each runtime starts them -------------

BUNDLE = Path("/lustre/store/runtime/" + "ef" * 32)
SNAPSHOT = Path("/lustre/store/code/art_" + "12" * 32)


def in_image(runtime: str, **kw) -> tuple[str, profiles.Profile]:
    from jobs.executors.slurm import python_for

    profile = profiles.Profile(partition="batch", container_runtime=runtime, **kw)
    params = sbatch_params(STAGE, profile, Path("/lustre/store"), IMAGE, code_root=SNAPSHOT, bundle=BUNDLE)
    python = python_for(IMAGE, profile=profile, store_root=Path("/lustre/store"), code_root=SNAPSHOT, bundle=BUNDLE,
                        squashfs=Path("/shared/images/nemo-rl.sqsh"))
    return render(params, Path("/lustre/store/runs/RUN/logs"), python), profile


def test_a_pyxis_job_brings_the_snapshot_and_the_bundle_through_the_store_mount():
    text, _ = in_image("pyxis")
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--container-mounts=/lustre/store:/lustre/store " in srun   # the snapshot and the bundle live there
    assert f"--container-workdir={SNAPSHOT}" in srun
    assert srun.endswith("python3 -u -m runtime.bootstrap -u -m submitit.core._submit /lustre/store/runs/RUN/logs")
    assert f"export PYTHONPATH={SNAPSHOT}\n" in text and f"export JOBS_RUNTIME_BUNDLE={BUNDLE}\n" in text
    assert f"export JOBS_IMAGE={IMAGE.reference}\n" in text and "ch-run" not in text


def test_a_charliecloud_job_runs_ch_run_with_usr2_ignored_and_the_same_bootstrap():
    text, _ = in_image("charliecloud", container_mounts=["/data:/data"])
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--container-image" not in text
    assert ("""sh -c 'trap "" USR2; exec "$@"' sh ch-run --home --bind=/lustre/store:/lustre/store --bind=/data:/data """
            f"--cd={SNAPSHOT} /shared/images/nemo-rl.sqsh -- sh -c {shlex.quote(slurm.IMAGE_ENV_SH)} sh "
            "python3 -u -m runtime.bootstrap -u -m submitit.core._submit") in srun
    assert f"export PYTHONPATH={SNAPSHOT}\n" in text and f"export JOBS_RUNTIME_BUNDLE={BUNDLE}\n" in text
    assert 'export USER="${USER:-$(id -un)}"' in text


def test_charliecloud_binds_take_no_flags_and_an_unknown_runtime_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ExecutorError, match="without flags"):
        in_image("charliecloud", container_mounts=["/data:/data:ro"])
    f = tmp_path / "profiles.yaml"
    f.write_text("p: {container_runtime: docker}\n")
    monkeypatch.setenv("JOBS_PROFILES", str(f))
    with pytest.raises(ExecutorError, match="container_runtime must be one of pyxis, charliecloud"):
        profiles.load("p")


def test_nano3_dry_run_starts_every_stage_through_the_bootstrap(tmp_path):
    """`jobs submit nano3 --stage all --executor slurm --dry-run` with a pyxis profile and pinned images:
    every stage's srun line runs the image's python3 through runtime.bootstrap, with the code snapshot
    and the runtime bundle that a real submit would write, under the one store mount."""
    from helpers import run_jobs
    from jobs import bundle

    lock = tmp_path / "machine.lock"
    lock.write_text(f"nemo: {{image: 'nvcr.io/nvidia/nemo:25.11.nemotron_3_nano', digest: 'sha256:{'aa' * 32}'}}\n"
                    f"nemo-rl: {{image: 'nvcr.io/nvidia/nemo-rl:v0.4.0.nemotron_3_nano', digest: 'sha256:{'bb' * 32}'}}\n")
    (tmp_path / "profiles.yaml").write_text("gpu: {partition: batch, container_mounts: ['/data:/data']}\n")
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "nano3", "--stage", "all", "--executor", "slurm", "--profile", "gpu", "--dry-run",
                 env={"JOBS_PROFILES": str(tmp_path / "profiles.yaml"), "JOBS_CONTAINERS_LOCK": str(lock)})
    assert r.code == 0, r.err
    scripts = r.out.split("### ")[1:]
    assert len(scripts) == 9 and not store.exists()
    digest = bundle.collect().digest.split(":", 1)[1]
    for script in scripts:
        srun = next(line for line in script.splitlines() if line.startswith("srun "))
        assert "--container-image=nvcr.io#nvidia/nemo" in srun and "@sha256:" in srun
        assert f"--container-mounts={store}:{store},/data:/data " in srun
        assert " python3 -u -m runtime.bootstrap -u -m submitit.core._submit " in srun
        assert f"export JOBS_RUNTIME_BUNDLE={store}/runtime/{digest}\n" in script
        assert f"export PYTHONPATH={store}/code/art_" in script


def test_a_profiles_ray_object_store_reaches_every_node_of_the_job(tmp_path, monkeypatch):
    """Unset, the script says nothing (Ray's default share of the job's memory); set, every task's
    environment carries it to runtime/ray_cluster.py. A non-positive size is refused when the profile loads."""
    stage = replace(STAGE, container=None)
    assert "JOBS_RAY_OBJECT_STORE_GB" not in rendered(stage, profiles.Profile(partition="debug"), None)
    text = rendered(stage, profiles.Profile(partition="debug", ray_object_store_gb=64.0), None)
    assert "\nexport JOBS_RAY_OBJECT_STORE_GB=64\n" in text and text.index("JOBS_RAY_OBJECT_STORE_GB") < text.index("srun")
    path = tmp_path / "profiles.yaml"
    path.write_text("small:\n  ray_object_store_gb: 0\n")
    monkeypatch.setenv("JOBS_PROFILES", str(path))
    with pytest.raises(ExecutorError, match="ray_object_store_gb must be a number in"):
        profiles.load("small")
