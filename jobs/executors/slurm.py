"""Run stages as Slurm jobs through submitit: one sbatch job per stage, chained with afterok.

The job's parameters come from the stage's recipe resources, then the user's profile on top, and,
for a stage with a container, pyxis flags on srun. `sbatch_params` is a pure function: the dry run,
the `--test-only` validation and the real submission all render from the same dict.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from jobs import containers, profiles
from jobs.errors import ExecutorError
from jobs.executors import Prepared
from jobs.provenance import PROJECT_ROOT
from lineage import Store
from runtime.attempts import BATCH_START_ENV, USR2_LEAD_S
from runtime.entry import StageJob



@dataclass(frozen=True)
class SlurmTarget:
    """What the Slurm executor needs to know beyond the plan."""

    profile: profiles.Profile
    allow_unpinned: bool = False


def image_for(stage: dict, target: SlurmTarget) -> containers.Image | None:
    """The stage's pinned image, or None when it names none or the profile runs without containers."""
    if not stage.get("container") or not target.profile.containers:
        return None
    return containers.resolve(stage["container"], target.allow_unpinned)


def sbatch_params(stage: dict, profile: profiles.Profile, store_root: Path, image: containers.Image | None,
                  code_root: Path = PROJECT_ROOT) -> dict:
    """submitit SlurmExecutor parameters for one stage (a recorded run spec or a StagePlan as dict).

    Raises ExecutorError, in one line, for anything that must not reach a script: see check_script.
    """
    res = stage.get("resources", {})
    profiles.check_resources(res, f"stage {stage['recipe']}/{stage['stage']}")
    p = profile

    def pick(key: str, res_key: str | None = None):
        value = getattr(p, key)
        return value if value is not None else res.get(res_key or key)

    time_value = p.time if p.time is not None else res.get("time_min", 60)
    params: dict = {
        "job_name": f"{stage['recipe']}-{stage['stage']}",
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
    if image is not None:
        mounts = [f"{store_root}:{store_root}", f"{code_root}:{code_root}", *p.container_mounts]
        srun_args += [f"--container-image={image.pyxis}", f"--container-mounts={','.join(mounts)}",
                      f"--container-workdir={code_root}", "--no-container-mount-home"]
        params["setup"] = [f"export PYTHONPATH={shlex.quote(str(code_root))}${{PYTHONPATH:+:$PYTHONPATH}}"]
    # The script's first command: when the job's own time began (sacct's Start has whole seconds and
    # includes Slurm's launch); the entry records it with the attempt, bench/ray_boot.py counts from it.
    params["setup"] = [f"export {BATCH_START_ENV}=$(date +%s.%N)", *params.get("setup", [])]
    srun_args += [str(a) for a in p.srun_args]
    if srun_args:
        params["srun_args"] = srun_args
    check_script(params, {"store path": store_root, "code path": code_root}, container=image is not None)
    return params


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


def python_for(image: containers.Image | None, here: str = sys.executable) -> str:
    """Inside a container the image's interpreter runs the job; outside, this environment's (`here`).
    Either starts through runtime.hold_usr2, which holds an early USR2 until submitit can take it."""
    python = "python3" if image is not None else shlex.quote(here)
    return f"{python} -u -m runtime.hold_usr2"


def render(params: dict, folder: Path, python: str, dependency: str | None = None) -> str:
    """The sbatch script submitit would submit for these parameters."""
    from submitit.slurm.slurm import _make_sbatch_string

    command = f"{python} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    extra = {"dependency": dependency} if dependency else {}
    try:
        return _make_sbatch_string(command=command, folder=folder, **params, **extra)
    except (TypeError, ValueError) as e:
        raise ExecutorError(f"bad Slurm parameter: {e}") from None


def test_only(script: str) -> None:
    """Ask the real slurmctld whether it would accept this job (`sbatch --test-only`), submitting nothing."""
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
        raise ExecutorError(f"Slurm refused the job: {msg.removeprefix('sbatch: error: ')}")


class SlurmExecutor:
    name = "slurm"

    def __init__(self, target: SlurmTarget):
        self.target = target

    def image_for(self, stage: dict) -> containers.Image | None:
        return image_for(stage, self.target)

    def prepare(self, store_root: Path, plan) -> list[Prepared]:
        """Render and validate every stage before anything is recorded."""
        prepared = []
        code_root = Path(plan.code.get("root") or PROJECT_ROOT)  # a reproduction's: its code snapshot
        with tempfile.TemporaryDirectory() as tmp:
            for stage in _stages(plan):
                image = self.image_for(stage)
                params = sbatch_params(stage, self.target.profile, store_root, image, code_root)
                test_only(render(params, Path(tmp), python_for(image)))  # checks #SBATCH lines only
                prepared.append(Prepared(params=params, image=image, record={
                    "container_image": image.reference if image else None, "profile": self.target.profile.name}))
        return prepared

    def dry_run(self, store_root: Path, plan) -> str:
        return dry_run(store_root, _stages(plan), self.target)

    def launch(self, store: Store, run_ids: list[str], prepared: list[Prepared],
               echo: Callable[[str], None] = print) -> bool:
        import submitit

        job_of: dict[str, str] = {}
        for run_id, prep in zip(run_ids, prepared):
            spec = store.run_spec(run_id)
            ups = sorted({job_of[ref["run"]] for ref in spec.get("pending_inputs", {}).values()})
            folder = store.run_dir(run_id) / "logs"
            executor = submitit.SlurmExecutor(folder=folder, python=python_for(prep.image))
            params = dict(prep.params)
            if ups:
                params["dependency"] = "afterok:" + ":".join(ups)
            executor.update_parameters(**params)
            job = executor.submit(StageJob(str(store.root), run_id))
            job_of[run_id] = job.job_id
            store.add_event(run_id, "job", executor="slurm", job_id=job.job_id, folder=str(folder),
                            image=prep.image.reference if prep.image else None,
                            dependency=params.get("dependency"))
            echo(f"{run_id}  {spec['stage']:<9} submitted as Slurm job {job.job_id}"
                 + (f" (after {', '.join(ups)})" if ups else ""))
        return True


def _stages(plan) -> list[dict]:
    from dataclasses import asdict

    return [asdict(sp) for sp in plan.stages]


def dry_run(store_root: Path, stages: list[dict], target: SlurmTarget) -> str:
    """Every stage's sbatch script, as it would be submitted, with the chain's dependencies spelled out."""
    out = []
    preview = SlurmTarget(target.profile, allow_unpinned=True)  # show it all; a real submit still refuses
    for stage in stages:
        image = image_for(stage, preview)
        params = sbatch_params(stage, target.profile, store_root, image)
        if image is not None and not image.pinned and not target.allow_unpinned:
            out.append(f"# WARNING: {image.name} ({image.image}) is not pinned by digest: a real submit refuses it")
        folder = store_root / "runs" / f"<run {stage['stage']}>" / "logs"
        ups = sorted({st for st, _ in stage.get("upstream", {}).values()})
        dependency = "afterok:" + ":".join(f"<job {u}>" for u in ups) if ups else None
        out.append(f"### {stage['recipe']}/{stage['stage']}"
                   + (f"  image {image.reference}" if image else "") + "\n"
                   + render(params, folder, python_for(image), dependency) + _preview(stage))
    return "\n".join(out)


def _preview(stage: dict) -> str:
    """What the stage itself will launch inside the job, when its module can tell without running
    (`preview(config, resources) -> str`, e.g. the NeMo RL config and command of nano3's rl)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(stage["module"]) is None:
        return ""
    preview = getattr(importlib.import_module(stage["module"]), "preview", None)
    text = preview(stage["config"], stage["resources"]) if preview else None
    return "".join(f"# {line}\n" if line else "#\n" for line in text.splitlines()) if text else ""
