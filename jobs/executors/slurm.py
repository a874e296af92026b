"""Run stages as Slurm jobs through submitit: one sbatch job per stage, chained with afterok.

The job's parameters come from the stage's recipe resources, then the user's profile on top. A
stage with a container runs in its pinned image under pyxis (srun flags) or Charliecloud (ch-run
in the job's command), bringing the code snapshot and the runtime bundle (jobs/bundle.py) from the
store. `sbatch_params`, `python_for` and `render` are pure functions of the plan's typed stage: the
dry run, the `--test-only` validation and the real submission all render from the same values.
"""
from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from jobs import bundle as bundles
from jobs import containers, profiles
from jobs.errors import ExecutorError
from jobs.executors.base import Prepared
from jobs.provenance import PROJECT_ROOT
from lineage import Store
from lineage.failures import budget
from lineage.layout import RUNTIME, RunDir, run_path, sweep_path
from runtime import cpu
from runtime.attempts import BATCH_START_ENV, USR2_LEAD_S
from runtime.entry import StageJob
from runtime.image import (BUNDLE_ENV, FIND, IMAGE_ENV, NODE_ADDRS_ENV, lacks_elsewhere_message, lacks_message, needs,
                           needs_elsewhere)

if TYPE_CHECKING:
    from jobs.plan import StagePlan


@dataclass(frozen=True)
class SlurmTarget:
    """What the Slurm executor needs to know beyond the plan."""

    profile: profiles.Profile
    allow_unpinned: bool = False


def image_for(container: str | None, target: SlurmTarget) -> containers.Image | None:
    """The pinned image of the stage's `container`, or None when it names none or the profile runs
    without containers."""
    if not container or not target.profile.containers:
        return None
    return containers.resolve(container, target.allow_unpinned)


def _name(stage: "StagePlan") -> str:
    return f"{stage.recipe}/{stage.stage}"


def sbatch_params(stage: "StagePlan", profile: profiles.Profile, store_root: Path, image: containers.Image | None,
                  code_root: Path = PROJECT_ROOT, bundle: Path | None = None) -> dict:
    """submitit SlurmExecutor parameters (its `update_parameters`) for one stage of the plan (or a
    recorded run spec: the same recipe, stage and resources).

    With an image, the job brings its code (`code_root`, the snapshot in the store) and the runtime
    bundle (`bundle`) into it: the store is mounted at its own path, PYTHONPATH names the code, and
    $JOBS_RUNTIME_BUNDLE the bundle (runtime.bootstrap appends it to sys.path). pyxis takes the
    image and mounts as srun flags; Charliecloud's are the job's command line (`python_for`).
    Raises ExecutorError, in one line, for anything that must not reach a script: see check_script.
    """
    res = stage.resources or {}
    profiles.check_resources(res, f"stage {_name(stage)}")
    p = profile

    def pick(key: str, res_key: str | None = None):
        value = getattr(p, key)
        return value if value is not None else res.get(res_key or key)

    time_value = p.time if p.time is not None else res.get("time_min", 60)
    params: dict = {
        "job_name": f"{stage.recipe}-{stage.stage}",
        "time": profiles.minutes(time_value),
        "nodes": int(pick("nodes") or 1),
        "ntasks_per_node": 1,
        "signal_delay_s": int(res.get("signal_delay_s", USR2_LEAD_S)),
    }
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(p, key):
            params[key] = getattr(p, key)
    if pick("cpus_per_task"):
        params["cpus_per_task"] = int(pick("cpus_per_task"))
    if pick("gpus_per_node"):
        params["gpus_per_node"] = int(pick("gpus_per_node"))
    mem_gb = pick("mem_gb")
    if mem_gb:
        params["mem"] = f"{int(mem_gb)}GB" if float(mem_gb) == int(mem_gb) else f"{int(float(mem_gb) * 1024)}MB"
    if p.exclusive:
        params["exclusive"] = True
    if p.sbatch:
        params["additional_parameters"] = {str(k): v for k, v in p.sbatch.items()}
    srun_args = []
    setup = []
    if p.cpu_kernels:   # one kernel build on every node, however the nodes' CPUs differ (runtime/cpu.py)
        setup.append(f"export {cpu.ENV}={p.cpu_kernels}")
    if p.ray_object_store_gb is not None:        # read by runtime/ray_cluster.py on every node
        from runtime.ray_cluster import OBJECT_STORE_ENV

        setup.append(f"export {OBJECT_STORE_ENV}={float(p.ray_object_store_gb):g}")
    if image is not None:
        env = {"PYTHONPATH": str(code_root), IMAGE_ENV: image.reference}
        if bundle is not None:
            env[BUNDLE_ENV] = str(bundle)
        setup += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        # The image has no Slurm commands: the nodes' addresses (NodeAddr) come in from the host.
        setup.append(f"export {NODE_ADDRS_ENV}=\"$(scontrol show node \"$SLURM_JOB_NODELIST\" -o 2>/dev/null | "
                     "sed -n 's/^NodeName=\\([^ ]*\\) .*NodeAddr=\\([^ ]*\\) .*/\\1=\\2/p' | paste -sd, -)\"")
        if p.container_runtime == "pyxis":
            srun_args += [f"--container-image={image.pyxis}",
                          f"--container-mounts={','.join(mounts(store_root, code_root, bundle, p))}",
                          f"--container-workdir={code_root}", "--no-container-mount-home"]
        else:
            setup.append('export USER="${USER:-$(id -un)}"')   # ch-run refuses to start without it
    # The script's first command: when the job's own time began (sacct's Start has whole seconds and
    # includes Slurm's launch); the entry records it with the attempt, bench/ray_boot.py counts from it.
    params["setup"] = [f"export {BATCH_START_ENV}=$(date +%s.%N)", *setup]
    srun_args += [str(a) for a in p.srun_args]
    if srun_args:
        params["srun_args"] = srun_args
    check_script(params, {"store path": store_root, "code path": code_root},
                 container=image is not None)
    if image is not None and p.container_runtime == "charliecloud" and any(m.count(":") > 1 for m in p.container_mounts):
        raise ExecutorError("container_mounts: ch-run binds take SRC:DST, without flags")
    return params


def mounts(store_root: Path, code_root: Path, bundle: Path | None, profile: profiles.Profile) -> list[str]:
    """SRC:DST of what the job brings into its image: the store at its own path (it holds the code
    snapshot and the runtime bundle; a code or bundle folder outside it gets its own mount), then the
    profile's `container_mounts`."""
    out = [f"{store_root}:{store_root}"]
    for extra in (code_root, bundle):
        if extra is not None and not _inside(Path(extra), store_root):
            out.append(f"{extra}:{extra}")
    return out + list(profile.container_mounts)


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(path).relative_to(root)
        return True
    except ValueError:
        return False


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_script(params: dict, paths: dict[str, Path], container: bool = False) -> None:
    """Refuse what would change the script's meaning: a control character anywhere (a newline ends an
    #SBATCH line and starts a live one), an extra key that is not an sbatch option, and, with a
    container, a store or code path pyxis would split (',' separates mounts, ':' source from target).
    Values themselves are shell-quoted by the renderer."""
    for what, path in paths.items():
        text = str(path)
        if _CONTROL.search(text):
            raise ExecutorError(f"{what} {text!r} has a control character; it would reach the sbatch script")
        if container and ("," in text or ":" in text):
            raise ExecutorError(f"{what} {text!r} holds ',' or ':', which pyxis --container-mounts cannot express")
    for key, value in (params.get("additional_parameters") or {}).items():
        flag = str(key).replace("_", "-")
        if flag not in profiles.SBATCH_OPTIONS or flag in profiles.SBATCH_OWNED:
            raise ExecutorError(f"extra sbatch key {key!r} is not an sbatch option this executor passes on "
                                "(see `sbatch --help`)")

    def walk(where: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{where}.{k}", k)
                walk(f"{where}.{k}", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{where}[{i}]", v)
        elif isinstance(value, str) and _CONTROL.search(value):
            raise ExecutorError(f"{where} {value[:60]!r} has a control character; it would reach the sbatch script")

    for key, value in params.items():
        walk(key, value)


#: Inside a Charliecloud image, before the command: the image's own environment (its config's ENV, which
#: ch-image keeps in /ch/environment, one K=V a line), as pyxis applies it. `ch-run --set-env` does the
#: same but refuses an image without the file (a squashfs made from a plain folder), which has none to apply.
IMAGE_ENV_SH = '[ -f /ch/environment ] && while IFS= read -r kv; do [ -n "$kv" ] && export "$kv"; done < /ch/environment; exec "$@"'
CH_ENV = ("sh", "-c", IMAGE_ENV_SH, "sh")


def python_for(image: containers.Image | None, here: str = sys.executable, profile: profiles.Profile | None = None,
               store_root: Path | None = None, code_root: Path = PROJECT_ROOT, bundle: Path | None = None,
               squashfs: Path | None = None) -> str:
    """The interpreter submitit names in the job's command (it appends `-u -m submitit.core._submit FOLDER`).

    Outside a container, this environment's (`here`) through runtime.hold_usr2, which holds an early
    USR2 until submitit can take it. In a container, the image's `python3` through runtime.bootstrap
    (the same hold, then the runtime bundle): under pyxis srun's flags name the image; under
    Charliecloud the command is `ch-run --home --bind=… --cd=CODE SQUASHFS -- sh -c IMAGE_ENV_SH sh python3 …`,
    started with USR2 ignored, because ch-run stays behind as the squashfs's FUSE server and Slurm signals
    every process of the step (runtime.hold_usr2 restores the signal's default in the job itself).
    IMAGE_ENV_SH applies the image's own ENV, as pyxis does: NVIDIA's nemo-rl image finds its Python
    through it (PATH starts with /opt/nemo_rl_venv/bin); without it `python3` is the system one, which
    has neither Ray nor NeMo RL.
    """
    if image is None:
        return f"{shlex.quote(here)} -u -m runtime.hold_usr2"
    inner = "python3 -u -m runtime.bootstrap"
    if profile is None or profile.container_runtime == "pyxis":
        return inner
    if squashfs is None:
        raise ExecutorError(f"no squashfs for {image.reference}: import it with `jobs containers import {image.name} "
                            "--runtime charliecloud`")
    binds = [f"--bind={m}" for m in mounts(store_root, code_root, bundle, profile)]
    # --home: the user's home, writable, at /home/$USER (caches: Hugging Face, W&B), as on the host;
    # the squashfs itself is read-only.
    ch_run = shlex.join(["ch-run", "--home", *binds, f"--cd={code_root}", str(squashfs), "--", *CH_ENV])
    return f"""sh -c 'trap "" USR2; exec "$@"' sh {ch_run} {inner}"""


#: What submitit's SlurmExecutor writes into every script besides the parameters (launch submits
#: through it): written here too, so the dry run and `--test-only` see the script Slurm gets.
SUBMITIT_FLAGS = {"wckey": "submitit", "open-mode": "append"}
#: Parameters that are not #SBATCH lines: the script's body, or the array's limit.
NOT_FLAGS = {"setup", "srun_args", "signal_delay_s", "additional_parameters", "array_parallelism"}


def _flag(key: str, value) -> str:
    key = key.replace("_", "-")
    return f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={shlex.quote(str(value))}"


def render(params: dict, folder: Path, python: str, dependency: str | None = None,
           array: tuple[int, int] | None = None) -> str:
    """The sbatch script of one job from its parameters (`sbatch_params`); with `array` (tasks, at
    most running at once), the job array's. #SBATCH lines in sorted order, the setup, then srun
    running submitit's job command under `python`, each task's output in submitit's files
    (`JobPaths`: `<job>_<task>_log.{out,err}`, an array task's job `<array>_<index>`)."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder)
    out, err = str(paths.stdout), str(paths.stderr)
    if array:
        out, err = out.replace("%j", "%A_%a"), err.replace("%j", "%A_%a")
    flags = {k: v for k, v in params.items() if k not in NOT_FLAGS and v is not None}
    flags.update(SUBMITIT_FLAGS, signal=f"USR2@{params.get('signal_delay_s', USR2_LEAD_S)}",
                 output=out.replace("%t", "0"), error=err.replace("%t", "0"))
    if dependency:
        flags["dependency"] = dependency
    if array:
        flags["array"] = f"0-{array[0] - 1}%{min(array)}"
    flags.update(params.get("additional_parameters") or {})
    lines = ["#!/bin/bash", "", "# Parameters", *(_flag(k, flags[k]) for k in sorted(flags))]
    if params.get("setup"):
        lines += ["", "# setup", *params["setup"]]
    srun = shlex.join(["srun", "--unbuffered", "--output", out, "--error", err, *params.get("srun_args", [])])
    command = f"{python} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    return "\n".join([*lines, "", "# command", "export SUBMITIT_EXECUTOR=slurm", f"{srun} {command}", ""])


def test_only(script: str, asked: str = "the job") -> None:
    """Ask the real slurmctld whether it would accept this job (`sbatch --test-only`), submitting nothing;
    a refusal names what was `asked` for (the stage, the profile, its partition...), which Slurm's own
    message ("Invalid partition name specified") does not."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(script)
    try:
        p = subprocess.run(["sbatch", "--test-only", f.name], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ExecutorError("sbatch is not on PATH: is this a Slurm login node? (dev cluster: dev/slurm/up.sh)") from None
    finally:
        Path(f.name).unlink()
    if p.returncode != 0:
        lines = [line for line in (p.stderr or p.stdout).splitlines() if line.strip()]
        msg = lines[-1] if lines else f"exit {p.returncode}"
        raise ExecutorError(f"Slurm refused {asked}: {msg.removeprefix('sbatch: error: ')}")


def _asked(stage: "StagePlan", profile: profiles.Profile, params: dict) -> str:
    """'tiny/sft under profile gpu (partition nope, account ml)': what a refused job asked for."""
    where = [f"{k} {params[k]}" for k in ("partition", "account", "qos", "constraint") if params.get(k)]
    return (f"{_name(stage)} under profile {profile.name or '(none)'} "
            f"({', '.join(where) or 'the default partition'})")


@dataclass(frozen=True)
class InImage:
    """Where a container job's pieces are: the code snapshot, the runtime bundle, the squashfs."""

    code: Path
    bundle_path: Path
    squashfs: Path | None = None     # Charliecloud only


def in_image(store_root: Path, plan_code: dict, image: containers.Image, profile: profiles.Profile,
             bundle: "bundles.Bundle", import_missing: bool = True) -> InImage:
    """The pieces of one container job. Under Charliecloud the squashfs is imported now, by digest,
    when missing (jobs.containers.squashfs_for: once per digest, safe when several submit at once);
    a dry run (`import_missing=False`) only names it."""
    from jobs.provenance import snapshot_path

    squashfs = None
    if profile.container_runtime == "charliecloud":
        folder = Path(profile.container_dir or containers.DEFAULT_DIRS["charliecloud"]).expanduser()
        if not image.pinned:
            squashfs = folder / f"<{image.name} is not pinned: nothing to import>"
        elif import_missing:
            squashfs = containers.squashfs_for(image, folder, runtime="charliecloud")
        else:
            squashfs = folder / containers.squashfs_name(image)
    return InImage(code=snapshot_path(store_root, plan_code), bundle_path=bundle.path(store_root), squashfs=squashfs)


def probe(image: containers.Image, where: InImage, profile: profiles.Profile, store_root: Path,
          stage: "StagePlan") -> None:
    """Ask the Charliecloud image itself, on this node, before anything is recorded: do the job's binds
    fit it (a bind's target must exist in a read-only image), does it run python3, and does it have
    every module the stage imports (runtime.image.needs)? One line naming what fails."""
    import json
    import os
    import shutil

    if not shutil.which("ch-run"):
        raise ExecutorError("ch-run is not on PATH: install Charliecloud (Debian: apt-get install charliecloud "
                            "squashfuse) or use container_runtime: pyxis")
    binds = []
    for m in mounts(store_root, where.code, where.bundle_path, profile):
        src, dst = m.split(":")[:2]
        while not Path(src).exists() and src == dst and Path(src).parent != Path(src):
            src = dst = str(Path(src).parent)   # not made yet (the store, the snapshot): its nearest folder
        binds.append(f"--bind={src}:{dst}")
    why = needs(vars(stage))   # runtime.image reads a run spec's fields by key
    env = {**os.environ, "USER": os.environ.get("USER") or "root"}
    env.pop("PYTHONPATH", None)

    def ask(python: str, modules) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["ch-run", *binds, str(where.squashfs), "--", *CH_ENV, python, "-c", FIND, *modules],
                                  capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ExecutorError(f"image {image.reference}: ch-run did not answer within 300 s") from None

    p = ask("python3", why)
    if p.returncode != 0:
        lines = [line.strip() for line in (p.stderr or p.stdout).splitlines() if line.strip()]
        raise ExecutorError(f"image {image.reference} cannot start the job under ch-run: "
                            f"{lines[-1] if lines else f'exit {p.returncode}'}")
    gone = json.loads(p.stdout.strip().splitlines()[-1])
    if gone:
        raise ExecutorError(lacks_message(gone, why, image.reference, _name(stage)))
    # The image's other interpreters the stage runs code in (eval's vLLM engines): each must run and have
    # its modules, asked the same way; the job asks again (runtime.image.check_image).
    for python, why in needs_elsewhere(vars(stage)).items():
        p = ask(python, why)
        gone = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else list(why)
        if gone:
            raise ExecutorError(lacks_elsewhere_message(gone, why, python, image.reference, _name(stage)))


@functools.cache
def check_pyxis() -> None:
    """Refuse, at submit, a pyxis run on a cluster whose srun lacks pyxis's --container-image: the
    job would be accepted and die in the queue with `srun: unrecognized option`."""
    try:
        done = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30)
        offered = "--container-image" in done.stdout + done.stderr
    except (OSError, subprocess.SubprocessError):
        offered = False
    if not offered:
        raise ExecutorError("this cluster's srun has no --container-image (pyxis is not installed): the profile's "
                            "container_runtime is pyxis; set container_runtime: charliecloud, or containers: false")


class SlurmExecutor:
    name = "slurm"

    def __init__(self, target: SlurmTarget):
        self.target = target
        self.bundle: bundles.Bundle | None = None     # collected at prepare, written to the store at launch

    def image_for(self, stage: "StagePlan") -> containers.Image | None:
        """The image of a plan's stage."""
        return image_for(stage.container, self.target)

    def prepare(self, store_root: Path, plan) -> list[Prepared]:
        """Render and validate every stage before anything is recorded; a Charliecloud image is
        imported (when missing) and asked whether it can run each stage."""
        prepared = []
        profile = self.target.profile
        probed: set = set()
        with tempfile.TemporaryDirectory() as tmp:
            for stage in plan.stages:
                image = self.image_for(stage)
                record = {"container_image": image.reference if image else None, "profile": profile.name,
                          "retries": budget(stage.resources.get("retries"), profile.retries)}
                where = None
                if image is not None:
                    if profile.container_runtime == "pyxis":
                        check_pyxis()
                    self.bundle = self.bundle or bundles.collect()
                    where = in_image(store_root, plan.code, image, profile, self.bundle)
                    record.update(container_runtime=profile.container_runtime,
                                  runtime_bundle={"digest": self.bundle.digest, "packages": self.bundle.packages})
                params, python = job(stage, profile, store_root, image, where)
                test_only(render(params, Path(tmp), python), _asked(stage, profile, params))  # #SBATCH lines only
                if where is not None and where.squashfs is not None:
                    key = (where.squashfs, tuple(needs(vars(stage))))
                    if key not in probed:
                        probe(image, where, profile, store_root, stage)
                        probed.add(key)
                prepared.append(Prepared(params=params, image=image, record=record, python=python))
        return prepared

    def dry_run(self, store_root: Path, plan, max_parallel: int | None = None) -> str:
        if plan.grid is None:
            return dry_run(store_root, plan.stages, self.target, plan.code)
        # A sweep: its first point's script as the job array `launch` submits, `--array=0-N%M`,
        # every task's logs in the sweep's folder.
        n = len(plan.stages)
        return dry_run(store_root, plan.stages[:1], self.target, plan.code,
                       array=(n, min(max_parallel or n, n), sweep_path(store_root, "<sweep>")))

    def launch(self, store: Store, run_ids: list[str], prepared: list[Prepared],
               echo: Callable[[str], None] = print, max_parallel: int | None = None) -> bool:
        """One sbatch job per run, in order, each after the jobs of the runs it takes inputs from
        (afterok); the points of one sweep that share their parameters as one job array (submitit's
        batch), at most `max_parallel` of it running at once, every task's logs in the sweep's folder."""
        import submitit

        if any(p.image is not None for p in prepared):
            store.folder(RUNTIME)   # made without following a link planted on the way
            bundles.store(self.bundle or bundles.collect(), store.root)
        specs = [store.run_spec(r) for r in run_ids]
        groups: dict[tuple, list[int]] = {}
        for i, (spec, prep) in enumerate(zip(specs, prepared)):
            sweep = (spec.sweep or {}).get("id")
            python = prep.python or python_for(prep.image)
            groups.setdefault((sweep, repr((sorted(prep.params.items()), python))) if sweep else (None, i),
                              []).append(i)
        job_of: dict[str, str] = {}
        for (sweep, _), members in groups.items():
            prep = prepared[members[0]]
            python = prep.python or python_for(prep.image)
            if len(members) > 1:
                self._array(store, [run_ids[i] for i in members], [specs[i] for i in members], prep, python,
                            sweep, max_parallel, echo)
                continue
            run_id, spec = run_ids[members[0]], specs[members[0]]
            ups = sorted({job_of[ref["run"]] for ref in spec.pending_inputs.values()})
            folder = RunDir(store.run_dir(run_id)).logs
            # submitit refuses a requeue past its own count of time-outs: the run's budget is that count.
            executor = submitit.SlurmExecutor(folder=folder, python=python,
                                              max_num_timeout=budget(spec.retries)["time_limit"])
            params = dict(prep.params)
            if ups:
                params["dependency"] = "afterok:" + ":".join(ups)
            executor.update_parameters(**params)
            job = executor.submit(StageJob(str(store.root), run_id))
            job_of[run_id] = job.job_id
            store.add_event(run_id, "job", executor="slurm", job_id=job.job_id, folder=str(folder),
                            image=prep.image.reference if prep.image else None,
                            dependency=params.get("dependency"))
            echo(f"{run_id}  {spec.stage:<9} submitted as Slurm job {job.job_id}"
                 + (f" (after {', '.join(ups)})" if ups else ""))
        return True

    @staticmethod
    def _array(store: Store, run_ids: list[str], specs: list, prep: Prepared, python: str, sweep: str,
               max_parallel: int | None, echo: Callable[[str], None]) -> None:
        """Independent runs of one sweep, one set of parameters: one sbatch of a job array."""
        import submitit

        folder = store.folder(sweep_path(Path(), sweep))
        executor = submitit.SlurmExecutor(folder=folder, python=python,
                                          max_num_timeout=budget(specs[0].retries)["time_limit"])
        executor.update_parameters(**prep.params, array_parallelism=max_parallel or len(run_ids))
        with executor.batch():
            jobs = [executor.submit(StageJob(str(store.root), run_id)) for run_id in run_ids]
        array = jobs[0].job_id.split("_")[0]
        for run_id, job in zip(run_ids, jobs):
            store.add_event(run_id, "job", executor="slurm", job_id=job.job_id, folder=str(folder),
                            image=prep.image.reference if prep.image else None, array=array, sweep=sweep)
        echo(f"sweep {sweep}: {len(jobs)} run(s) submitted as Slurm array job {array} "
             f"%{min(max_parallel or len(jobs), len(jobs))}")
        for run_id, spec, job in zip(run_ids, specs, jobs):
            echo(f"{run_id}  {spec.stage:<9} Slurm job {job.job_id}")


def job(stage: "StagePlan", profile: profiles.Profile, store_root: Path, image: containers.Image | None,
        where: InImage | None) -> tuple[dict, str]:
    """(sbatch parameters, the command's interpreter) of one stage: what the dry run shows, what
    `--test-only` checks and what is submitted."""
    if image is None or where is None:
        return sbatch_params(stage, profile, store_root, None), python_for(None)
    params = sbatch_params(stage, profile, store_root, image, code_root=where.code, bundle=where.bundle_path)
    return params, python_for(image, profile=profile, store_root=store_root, code_root=where.code,
                              bundle=where.bundle_path, squashfs=where.squashfs)


def dry_run(store_root: Path, stages: "list[StagePlan]", target: SlurmTarget, code: dict | None = None,
            array: tuple[int, int, Path] | None = None) -> str:
    """Every stage's sbatch script, as it would be submitted, with the chain's dependencies spelled
    out; with `array` (tasks, at most running at once, the folder), one stage's job array."""
    out = []
    preview = SlurmTarget(target.profile, allow_unpinned=True)  # show it all; a real submit still refuses
    bundle = None
    for stage in stages:
        image = image_for(stage.container, preview)
        where = None
        if image is not None:
            bundle = bundle or bundles.collect()
            where = in_image(store_root, code or {"snapshot": "<code snapshot>"}, image, target.profile, bundle,
                             import_missing=False)
        params, python = job(stage, target.profile, store_root, image, where)
        if image is not None and not image.pinned and not target.allow_unpinned:
            out.append(f"# WARNING: {image.name} ({image.image}) is not pinned by digest: a real submit refuses it")
        folder = array[2] if array else RunDir(run_path(store_root, f"<run {stage.stage}>")).logs
        ups = sorted({st for st, _ in stage.upstream.values()})
        dependency = "afterok:" + ":".join(f"<job {u}>" for u in ups) if ups else None
        out.append(f"### {_name(stage)}"
                   + (f"  image {image.reference}" if image else "")
                   + (f"  job array of {array[0]} tasks" if array else "") + "\n"
                   + render(params, folder, python, dependency, array[:2] if array else None) + _preview(stage))
    return "\n".join(out)


def _preview(stage: "StagePlan") -> str:
    """What the stage itself will launch inside the job, when its module can tell without running
    (e.g. the NeMo RL config and command of nano3's rl), as comments."""
    from jobs.preview import stage_preview

    text = stage_preview(stage.module, stage.config, stage.resources)
    return "".join(f"# {line}\n" if line else "#\n" for line in text.splitlines()) if text else ""
