"""Cluster profiles: where and how a user's jobs run, kept in a YAML file, like Nemotron's env.toml.

    # ~/.config/jobs/profiles.yaml   (or $JOBS_PROFILES)
    default:
      partition: debug
      account: ci
      time: "01:00:00"
    big:
      extends: default
      nodes: 2
      gpus_per_node: 8
      sbatch: {mail-type: END}
      srun_args: ["--cpu-bind=none"]
    dev:
      partition: debug
      containers: false      # no container runtime here: stages run in this Python environment
    charlie:
      partition: debug
      container_runtime: charliecloud   # ch-run a squashfs imported by digest (default: pyxis)
      container_dir: /shared/images     # where `jobs containers import` keeps the squashfs files
    mixed:
      extends: default
      cpu_kernels: avx2      # torch's CPU kernels in every job, whatever each node's CPU offers (runtime/cpu.py)
    spot:
      extends: default
      retries: {preempted: 20, node_failure: 2, time_limit: 1}   # requeues per failure class (lineage/failures.py)

A profile's values override the recipe's resources for the stage. Every value ends up in an sbatch
script, so each is checked on load (types, ranges, no control characters, sbatch option names):
a bad profile is one line and exit 2, never a traceback or a live line in a script.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from lineage.failures import retry_problem
from runtime.cpu import X86_KERNELS
from stages import schema
from jobs.errors import ExecutorError

PROFILES_FILE = "~/.config/jobs/profiles.yaml"

#: sbatch's long options, from `sbatch --help` and `sbatch --usage` of Slurm 22.05.8 (Debian 12's
#: slurm-client; `sbatch --help | grep -oE -- '--[a-z][a-z-]*'`). Written out so that a profile is
#: checked the same way on a machine without Slurm. An `sbatch:` key outside it is refused.
SBATCH_OPTIONS = frozenset("""
account array bb bbf begin chdir cluster-constraint clusters comment constraint container contiguous
core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency
distribution error exclude exclusive export export-file extra-node-info get-user-env gid gpu-bind
gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags help hold ignore-pbs input
job-name licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network
nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-node
ntasks-per-socket output overcommit oversubscribe parsable partition power priority profile propagate
qos quiet reboot requeue reservation signal sockets-per-node spread-job switches thread-spec
threads-per-core time time-min tmp uid usage use-min-nodes verbose version wait wckey wrap
""".split())
#: Options the executor sets itself, or that would stop the script from being a batch job.
SBATCH_OWNED = frozenset("array dependency error help input output parsable usage version wait wrap".split())

#: How a container job starts: pyxis (srun --container-image, NVIDIA's clusters) or Charliecloud
#: (ch-run on a squashfs, unprivileged). Both bring the same code snapshot and runtime bundle.
RUNTIMES = ("pyxis", "charliecloud")

_MOUNT = r"[^,:]+:/[^,:]*(:[A-Za-z0-9+=_-]+)?"   # pyxis SRC:DST[:FLAGS], one per item (a comma splits mounts)
_NAME = r"[A-Za-z0-9_.,+-]+"                     # partition (or a comma list), account, qos


def _sbatch_extra(value: dict) -> str | None:
    """`sbatch:` keys must be sbatch's long options (mail-type or mail_type), values scalars."""
    for key, v in value.items():
        flag = str(key).replace("_", "-")
        if not isinstance(key, str) or flag not in SBATCH_OPTIONS:
            return f"key {key!r} is not an sbatch option (see `sbatch --help`; e.g. mail-type, reservation)"
        if flag in SBATCH_OWNED:
            return f"key {key!r} is set by the executor and cannot be given here"
        problem = _sbatch_value_ok(v)
        if problem:
            return f"[{key}] {problem.removeprefix('value ')}"
    return None


def _sbatch_value_ok(v) -> str | None:
    if isinstance(v, str):
        return next(iter(schema.Str().problems(v, "value")), None)
    if v is True or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return None
    return f"must be a string, a number or true (got {v!r:.60})"


#: Requeues allowed per transient failure class, e.g. {preempted: 10, node_failure: 2, time_limit: 1}
#: (lineage/failures.py: the classes, the defaults, what is refused).
RETRIES = schema.Map({}, extra=True, required=False, null=True, check=retry_problem)

#: What a profile may hold. Bounds are what no real cluster exceeds: beyond them a value is a typo.
PROFILE = schema.Map({
    "extends": schema.Str(required=False, null=True),
    "partition": schema.Str(pattern=_NAME, required=False, null=True),
    "account": schema.Str(pattern=_NAME, required=False, null=True),
    "qos": schema.Str(pattern=_NAME, required=False, null=True),
    "time": schema.Any(required=False, null=True),   # checked by minutes()
    "nodes": schema.Int(1, 10_000, required=False, null=True),
    "gpus_per_node": schema.Int(0, 64, required=False, null=True),
    "cpus_per_task": schema.Int(1, 4096, required=False, null=True),
    "mem_gb": schema.Float(0, 65_536, open_lo=True, required=False, null=True),
    "ray_object_store_gb": schema.Float(0.1, 65_536, required=False, null=True),
    "constraint": schema.Str(empty=False, required=False, null=True),
    "exclusive": schema.Bool(required=False, null=True),
    "sbatch": schema.Map({}, extra=True, required=False, null=True, check=_sbatch_extra),
    "srun_args": schema.List(schema.Str(), required=False, null=True),
    "container_mounts": schema.List(schema.Str(check=lambda v: None if re.fullmatch(_MOUNT, v) else
                                               f"must be SRC:DST[:FLAGS], DST absolute, no comma (got {v!r:.60})"),
                                    required=False, null=True),
    "containers": schema.Bool(required=False),
    "container_runtime": schema.Str(choices=RUNTIMES, required=False),
    "container_dir": schema.Str(empty=False, required=False, null=True),
    "store": schema.Str(empty=False, required=False, null=True),
    "cpu_kernels": schema.Str(choices=X86_KERNELS, required=False, null=True),
    "retries": RETRIES,
})

#: A stage's `resources` in recipe.yaml: the same quantities, with the same bounds.
RESOURCES = schema.Map({
    "nodes": PROFILE.keys["nodes"], "gpus_per_node": PROFILE.keys["gpus_per_node"],
    "cpus_per_task": PROFILE.keys["cpus_per_task"], "mem_gb": PROFILE.keys["mem_gb"],
    "time_min": schema.Int(1, 525_600, required=False),          # a year
    "signal_delay_s": schema.Int(1, 3_600, required=False),
    "retries": RETRIES,
})
MAX_MINUTES = 525_600


@dataclass(frozen=True)
class Profile:
    name: str = "default"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | int | None = None          # Slurm time ("1-00:00:00", "90", "02:00:00") or minutes
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    ray_object_store_gb: float | None = None         # per node; unset: Ray's default, 30% of the job's memory there
    constraint: str | None = None
    exclusive: bool | None = None
    sbatch: dict = field(default_factory=dict)       # extra #SBATCH --key=value
    srun_args: list = field(default_factory=list)    # extra srun arguments
    container_mounts: list = field(default_factory=list)
    containers: bool = True                          # false on clusters without a container runtime: run on the host
    container_runtime: str = "pyxis"                 # pyxis | charliecloud
    container_dir: str | None = None                 # charliecloud: the imported squashfs files (shared)
    store: str | None = None
    cpu_kernels: str | None = None                   # avx512 | avx2 | default: torch's CPU kernels in every job (runtime/cpu.py)
    retries: dict | None = None                      # requeues per failure class, over the recipe's (lineage/failures.py)


KEYS = {f.name for f in fields(Profile)} - {"name"}


def profiles_path() -> Path:
    return Path(os.environ.get("JOBS_PROFILES", PROFILES_FILE)).expanduser()


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ExecutorError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or 'cannot parse'}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ExecutorError(f"{path}: cannot read it ({e})") from None
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ExecutorError(f"{path}: expected a mapping of profile names")
    return raw


def load(name: str | None) -> Profile:
    """The named profile (with `extends` applied); no name and no file give an empty default."""
    path = profiles_path()
    raw = _read(path)
    if name is None:
        name = "default"
        if name not in raw:
            return Profile()
    if name not in raw:
        known = ", ".join(sorted(map(str, raw))) or "none"
        raise ExecutorError(f"no profile {name!r} in {path} (profiles: {known})")
    merged: dict = {}
    chain, cur = [], name
    while cur is not None:
        if cur in chain:
            raise ExecutorError(f"{path}: profile {name!r} extends itself through {' -> '.join(chain)}")
        if not isinstance(cur, str) or cur not in raw:
            raise ExecutorError(f"{path}: profile {chain[-1]!r} extends unknown profile {cur!r}")
        if not isinstance(raw[cur] or {}, dict):
            raise ExecutorError(f"{path}: profile {cur!r} must be a mapping of settings (got {raw[cur]!r:.60})")
        chain.append(cur)
        cur = (raw[cur] or {}).get("extends")
    for link in reversed(chain):
        merged.update({k: v for k, v in (raw[link] or {}).items() if k != "extends"})
    unknown = sorted(str(k) for k in set(merged) - KEYS)
    if unknown:
        raise ExecutorError(f"{path}: profile {name!r} has unknown keys {unknown} (valid: {', '.join(sorted(KEYS))})")
    problems = schema.check(merged, PROFILE, "")
    if not problems and merged.get("time") is not None:
        try:
            minutes(merged["time"])
        except ExecutorError as e:
            problems.append(str(e))
    if problems:
        raise ExecutorError(f"{path}: profile {name!r}: " + "; ".join(problems))
    for key in ("sbatch", "srun_args", "container_mounts"):
        if merged.get(key) is None:
            merged.pop(key, None)
    return Profile(name=name, **merged)


def check_resources(resources: dict, where: str) -> None:
    """A stage's recipe.yaml `resources`, checked before anything is recorded or rendered."""
    problems = schema.check(resources, RESOURCES, "resources")
    if problems:
        raise ExecutorError(f"{where}: " + "; ".join(problems))


_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def minutes(value: str | int) -> int:
    """Slurm's time formats -> whole minutes (rounded up, as Slurm does); at most a year."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ExecutorError(f"time {value!r:.60} is not a Slurm time (MM, HH:MM:SS, D-HH, D-HH:MM:SS)")
    if isinstance(value, int):
        if value <= 0:
            raise ExecutorError(f"time {value} must be positive")
        if value > MAX_MINUTES:
            raise ExecutorError(f"time {value} minutes is more than a year")
        return value
    m = _TIME.match(value.strip())
    if not m or len(value) > 20:
        raise ExecutorError(f"time {value!r:.60} is not a Slurm time (MM, HH:MM:SS, D-HH, D-HH:MM:SS)")
    d, a, b, c = (int(x) if x else None for x in m.group("d", "a", "b", "c"))
    if d is not None:   # D-HH[:MM[:SS]]
        secs = d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        secs = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        secs = a * 60 + b
    else:                # MM
        secs = a * 60
    if secs <= 0:
        raise ExecutorError(f"time {value!r} must be positive")
    if secs > MAX_MINUTES * 60:
        raise ExecutorError(f"time {value!r} is more than a year")
    return -(-secs // 60)
