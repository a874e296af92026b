"""The run record as a type: what one stage run is asked to compute, built once by the plan.

A `RunSpec` is written once, as `records/run/<fan>/<id>.json`, and never rewritten; everything that
changes later (state, attempts, inputs filled in when an upstream run ends, outputs) is an event.
Its JSON is the record format every store already holds: `to_json` writes the same keys a record
always had, and `from_json` reads any record, older or hand-made ones with keys missing included
(a missing key takes its default; a key this type does not know is kept in `extra` and written back).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: Keys every record holds. The optional ones below are written only when set, as they always were.
_ALWAYS = ("recipe", "stage", "module", "config", "inputs", "pending_inputs", "input_kinds", "outputs",
           "resources", "container", "ray", "executor", "code", "environment")


@dataclass(frozen=True)
class RunSpec:
    recipe: str
    stage: str
    module: str | None = None
    config: dict = field(default_factory=dict)             # resolved, secrets redacted (lineage.secrets)
    inputs: dict[str, str] = field(default_factory=dict)   # role -> artifact ID, known at submit
    pending_inputs: dict[str, dict] = field(default_factory=dict)  # role -> {"run", "output"} of an upstream run
    input_kinds: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> artifact kind
    resources: dict = field(default_factory=dict)
    container: str | None = None                           # the logical image name in containers.lock
    ray: bool = False
    executor: str | None = None
    code: dict = field(default_factory=dict)               # git_sha, dirty, snapshot (an artifact ID), root
    environment: dict = field(default_factory=dict)        # the Python environment's digest and packages
    # The executor's facts (a Slurm run: its profile, and its image or None for no container).
    profile: str | None = None
    container_image: str | None = None
    container_runtime: str | None = None
    runtime_bundle: dict | None = None
    # A reproduction: the run it re-runs and, when allowed, what differed from that run's record.
    reproduces: str | None = None
    env_drift: dict | None = None
    run_key: str | None = None      # set when every input is known at submit (lineage.ids.run_key)
    sweep: dict | None = None       # a sweep's point: {"id", "point", "values"} (jobs/sweep.py)
    retries: dict | None = None     # a Slurm run's requeues allowed per failure class (lineage/failures.py)
    id: str | None = None           # set by Store.create_run
    created: float | None = None
    extra: dict = field(default_factory=dict)   # keys of a record this type does not name, kept as read

    @classmethod
    def from_json(cls, obj: dict) -> "RunSpec":
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in obj.items() if k in known},
                   extra={k: v for k, v in obj.items() if k not in known})

    def to_json(self) -> dict:
        """The record's JSON object, key for key as records have always been written."""
        out = {k: v for k, v in asdict(self).items() if k in _ALWAYS or (k != "extra" and v is not None)}
        if self.profile is not None:   # a Slurm run records its image even when it runs in none
            out["container_image"] = self.container_image
        return {**self.extra, **out}

    def with_(self, **changes: Any) -> "RunSpec":
        return replace(self, **changes)

    def key(self) -> str:
        """The run cache's key of this run as it stands (lineage.ids.run_key)."""
        from lineage.ids import run_key

        return run_key(self.to_json())

    # Read-only mapping access by the record's JSON keys, for scripts and tests written against the
    # stored JSON; code in this project reads attributes.
    def __getitem__(self, key: str) -> Any:
        doc = self.to_json()
        return doc[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_json()
