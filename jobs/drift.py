"""Environment drift: how the image, the Python packages and the CPU kernels a run would run in now
differ from what its record says it ran in. The one submit path (jobs/submit.py) asks it of a
reproduction before the executor prepares; `jobs diff` says the package changes between two runs.
"""
from __future__ import annotations

from typing import Callable

from jobs.errors import JobsError
from lineage.runspec import RunSpec
from lineage.store import RunView


def package_drift(was: dict, now: dict) -> list[str]:
    names = sorted(set(was) | set(now))
    return [f"{n} {was.get(n, '-')} -> {now.get(n, '-')}" for n in names if was.get(n) != now.get(n)]


def settle_drift(old: RunView, plan, executor, allow: bool, echo: Callable[[str], None] = print) -> dict:
    """What a reproduction of `old` would run in now, against what the record says it ran in: the
    container image (the stage's pin in containers.lock today, when the executor runs it in one) and
    the Python environment. Asked before the executor prepares, so an image that moved is refused
    before it is imported. A difference is refused in one line unless `allow`; then the new record
    says what was recorded and what ran (`env_drift`). Returns the facts for the new record."""
    spec = old.spec
    drift: dict = {}
    image_for = getattr(executor, "image_for", None)   # only an executor that runs images has one
    image = image_for(plan.stages[0]) if image_for else None
    was, now = spec.container_image, image.reference if image else None
    if was != now:
        drift["container_image"] = {"recorded": was, "ran": now}
    env = plan.environment
    packages = package_drift(spec.environment.get("packages", {}), env["packages"])
    if spec.environment.get("python") != env["python"]:
        packages.insert(0, f"python {spec.environment.get('python')} -> {env['python']}")
    if packages:
        drift["python"] = {"recorded": spec.environment.get("digest"), "ran": env["digest"], "changes": packages}
    kernels = recorded_kernels(old)
    if kernels and env.get("cpu_kernels") and kernels != env["cpu_kernels"]:
        drift["cpu_kernels"] = {"recorded": kernels, "ran": env["cpu_kernels"]}
    if drift and not allow:
        raise JobsError(f"{_drift_words(spec, drift)} (--allow-env-drift runs with what is here now and records the drift)")
    if drift:
        echo(f"environment drift (allowed): {_drift_words(spec, drift)}")
    else:
        echo(f"environment matches the record: {now or env['digest'][:23]}")
    return {"reproduces": old.id, **({"env_drift": drift} if drift else {})}


def recorded_kernels(view: RunView) -> str | None:
    """The CPU kernels the run's torch ran on: its last attempt's node's (runtime/cpu.py), else, in a
    record from before attempts named them, the ones the submitting machine would have run."""
    ran = [a["cpu_kernels"] for a in view.attempts if a.get("cpu_kernels")]
    return ran[-1] if ran else view.spec.environment.get("cpu_kernels")


def _drift_words(spec: RunSpec, drift: dict) -> str:
    words = []
    image = drift.get("container_image")
    if image:
        name = spec.container or "the stage's image"
        if image["recorded"] and image["ran"]:
            words.append(f"the recorded image {image['recorded']} is no longer the pin of {name!r} "
                         f"(containers.lock pins {image['ran']})")
        elif image["recorded"]:
            words.append(f"the run ran in {image['recorded']}, but profile {spec.profile!r} now runs without containers")
        else:
            words.append(f"the run ran without a container, but would now run in {image['ran']}")
    kernels = drift.get("cpu_kernels")
    if kernels:
        words.append(f"the run's torch ran {kernels['recorded']} CPU kernels, here it would run {kernels['ran']} "
                     f"(other floats; ATEN_CPU_CAPABILITY={kernels['recorded']} runs the recorded ones where the CPU has them)")
    changes = drift.get("python", {}).get("changes", [])
    if changes:
        words.append("environment differs from the record: " + "; ".join(changes[:5])
                     + (f"; … {len(changes) - 5} more" if len(changes) > 5 else ""))
    return "; ".join(words)
