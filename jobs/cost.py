"""What an attempt waited for and what it used, from what the store holds (no write of its own).

Per attempt: `queued`, the seconds from its submission to its start: sacct's Submit to Start where
the attempt's usage holds them (a Slurm run's, recorded by jobs/reconcile.py), else from the Slurm
`job` event naming its job id (the latest one before it; else the run's creation, which is a local
run's submit) to the batch script's first line (`batch_start`, Slurm only) or else to the stage entry
(`start`); and `boot`, the seconds from the batch script's first line to the stage entry: image import
and bootstrap. An attempt that never started has neither.

What it used (`usage`): a Slurm attempt's as its job's accounting kept it (sacct's Elapsed, AllocTRES
and the largest MaxRSS of its steps, `parse_usage`), recorded once on the attempt; a local attempt's
from its own start and end and the run's resources (source "local"). A field the accounting lacks
(MaxRSS under jobacct_gather/none) is None: not measured, never 0. `run_cost` and `total` sum a run's
and a chain's attempts, failed ones included (`jobs show ART --cost`, over `ancestry`). Below the
floor: reconcile and triage may use it.
"""
from __future__ import annotations

import time

#: sacct's fields of each instance of a job (-D: a requeued job's earlier ones too) and of its steps.
USAGE_FIELDS = "JobID,JobIDRaw,State,Submit,Start,End,ElapsedRaw,AllocTRES,MaxRSS"
#: A job instance in one of these states has not ended: its Elapsed still grows.
NOT_ENDED = ("RUNNING", "PENDING", "REQUEUED_HOLD", "RESIZING", "SUSPENDED")
#: sacct's Start has whole seconds; the batch script's first line comes after it.
START_SLACK_S = 2.0
#: An attempt's phases as runtime/entry.py times them, in the order they run.
PHASES = ("verify", "ray_start", "stage", "ray_stop", "gate", "register")
#: The stage's own phases inside `stage` (ctx.timed, recorded as stage.<phase>): loading, training, saving.
STAGE_PHASES = ("stage.load", "stage.train", "stage.save")
#: What a run's and a chain's cost rows hold besides their phases, summed over attempts.
SUMMED = ("queued", "elapsed_s", "cpu_hours", "gpu_hours")


def num(x) -> float | None:
    """A recorded number as a float; None for anything else (a missing field, a bool)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _submitted(view, attempt: dict) -> float | None:
    """When this attempt was handed to its executor, as recorded."""
    start = num(attempt.get("batch_start")) or num(attempt.get("start"))
    jobs = [j for j in view.jobs if num(j.get("time")) is not None]
    mine = [j for j in jobs if attempt.get("job_id") and str(j.get("job_id")) == str(attempt["job_id"])]
    before = [j for j in (mine or jobs) if start is None or j["time"] <= start]
    if before:
        return max(j["time"] for j in before)
    return num(getattr(view.spec, "created", None)) if not jobs else None


def queue_span(view, attempt: dict) -> tuple[float | None, float | None]:
    """(submitted, began): the ends of an attempt's `queued`. sacct's Submit and Start where its usage
    holds both, else its submission as recorded and the batch script's first line (or the stage entry)."""
    used = attempt.get("usage") or {}
    sub, began = num(used.get("submit")), num(used.get("start"))
    if sub is None or began is None:   # no accounting of its own: from the recorded times
        start, batch = num(attempt.get("start")), num(attempt.get("batch_start"))
        sub, began = _submitted(view, attempt), batch if batch is not None else start
    return sub, began


def waits(view) -> list[dict]:
    """[{"attempt": n, "queued": s | None, "boot": s | None}] for each attempt of a run view."""
    out = []
    for a in view.attempts:
        start, batch = num(a.get("start")), num(a.get("batch_start"))
        sub, began = queue_span(view, a)
        out.append({"attempt": a.get("attempt"),
                    "queued": round(began - sub, 3) if began is not None and sub is not None and began >= sub else None,
                    "boot": round(start - batch, 3) if start is not None and batch is not None and start >= batch else None})
    return out


# ---- what an attempt used ---------------------------------------------------------------------
def _epoch(text: str) -> float | None:
    """sacct's local time (2026-11-28T07:25:14) as epoch seconds; None for Unknown, None, empty."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def size_bytes(text: str) -> int | None:
    """Slurm's size (1234K, 16G, 512M, a plain number of bytes) in bytes; None when empty."""
    text = text.strip()
    if not text:
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}.get(text[-1].upper())
    try:
        return int(float(text[:-1] if scale else text) * (scale or 1))
    except ValueError:
        return None


def tres(text: str) -> dict[str, str]:
    """AllocTRES (billing=2,cpu=2,gres/gpu=1,mem=16G,node=1) as {name: value}."""
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def hours(seconds: float | None, count: int | None) -> float | None:
    return seconds * count / 3600 if seconds is not None and count is not None else None


def parse_usage(text: str) -> dict[str, list[dict]]:
    """`sacct -n -P -D -j JOBS -o USAGE_FIELDS` as job id -> its instances, oldest first, each
    {source, job_id, state, submit, start, end, elapsed_s, cpus, gpus, mem_bytes, max_rss_bytes,
    cpu_hours, gpu_hours}; an instance is found under its JobID and its JobIDRaw (an array task's
    attempt records the raw one). A step's line (JOBID.batch, JOBID.0) adds its MaxRSS to the
    instance above it."""
    names = USAGE_FIELDS.split(",")
    out: dict[str, list[dict]] = {}
    last: dict | None = None
    for line in text.splitlines():
        if line.count("|") != len(names) - 1:
            continue
        row = dict(zip(names, line.split("|")))
        if "." in row["JobID"]:   # a step of the instance above
            rss = size_bytes(row["MaxRSS"])
            if last is not None and rss is not None:
                last["max_rss_bytes"] = max(rss, last["max_rss_bytes"] or 0)
            continue
        state = row["State"].split()[0] if row["State"].strip() else ""
        alloc = tres(row["AllocTRES"])
        elapsed = int(row["ElapsedRaw"]) if row["ElapsedRaw"].strip().isdigit() else None
        cpus = int(alloc["cpu"]) if alloc.get("cpu", "").isdigit() else None
        gpus = (int(alloc["gres/gpu"]) if alloc.get("gres/gpu", "").isdigit() else 0) if alloc else None
        last = {"source": "sacct", "job_id": row["JobID"], "state": state, "submit": _epoch(row["Submit"]),
                "start": _epoch(row["Start"]), "end": _epoch(row["End"]), "elapsed_s": elapsed, "cpus": cpus,
                "gpus": gpus, "mem_bytes": size_bytes(alloc.get("mem", "")), "max_rss_bytes": size_bytes(row["MaxRSS"]),
                "cpu_hours": hours(elapsed, cpus), "gpu_hours": hours(elapsed, gpus)}
        for key in {row["JobID"], row["JobIDRaw"]}:
            out.setdefault(key, []).append(last)
    return out


def instance_of(attempt: dict, instances: list[dict]) -> dict | None:
    """The job instance an attempt ran in: the latest to start at or before the attempt's batch
    script (a requeued job's attempts share its id); None until sacct has seen that instance end
    (its Elapsed still grows, and an earlier instance must not stand in for it)."""
    began = num(attempt.get("batch_start")) or num(attempt.get("start"))
    if began is None:
        return None
    fits = [i for i in instances if i["start"] is not None and i["start"] <= began + START_SLACK_S]
    last = max(fits, key=lambda i: i["start"]) if fits else None
    return last if last is not None and last["state"] and last["state"] not in NOT_ENDED else None


def _allocation(resources: dict) -> tuple[int, int]:
    """(CPUs, GPUs) a run's resources ask for: one task per node, as the Slurm executor submits it."""
    nodes = int(resources.get("nodes") or 1)
    return nodes * int(resources.get("cpus_per_task") or 1), nodes * int(resources.get("gpus_per_node") or 0)


NOT_MEASURED = {"source": None, "elapsed_s": None, "cpus": None, "gpus": None, "mem_bytes": None,
                "max_rss_bytes": None, "cpu_hours": None, "gpu_hours": None}


def usage(view) -> list[dict]:
    """What each attempt of a run view used: a Slurm attempt's recorded accounting (all None until
    jobs/reconcile.py has recorded it), a local attempt's from its own times and the run's resources."""
    out = []
    for a in view.attempts:
        if view.spec.executor == "slurm":
            used = {**NOT_MEASURED, **(a.get("usage") or {})}
        else:
            start, end = num(a.get("start")), num(a.get("end"))
            elapsed = round(end - start, 3) if start is not None and end is not None and end >= start else None
            res = view.spec.resources or {}
            cpus, gpus = _allocation(res)
            mem = num(res.get("mem_gb"))
            used = {**NOT_MEASURED, "source": "local", "elapsed_s": elapsed, "cpus": cpus, "gpus": gpus,
                    "mem_bytes": int(mem * (1 << 30)) if mem is not None else None,
                    "cpu_hours": hours(elapsed, cpus), "gpu_hours": hours(elapsed, gpus)}
        out.append({"attempt": a.get("attempt"), **used})
    return out


def _sum(values) -> float | None:
    """The sum of the measured values; None when none was measured."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def run_cost(view) -> dict:
    """One run's row: its attempts (failed ones too), and per attempt summed: queued, each phase,
    elapsed, CPU and GPU hours; the largest max RSS; `unmeasured`, the attempts whose elapsed is not
    known (a Slurm one sacct has not seen end, one still running), left out of the sums."""
    queued = {w["attempt"]: w["queued"] for w in waits(view)}
    used = usage(view)
    phases = [a.get("phases") or {} for a in view.attempts]
    return {"run": view.id, "recipe": view.spec.recipe, "stage": view.spec.stage, "state": view.state,
            "attempts": len(view.attempts), "unmeasured": sum(u["elapsed_s"] is None for u in used),
            "queued": _sum(queued.values()),
            "phases": {p: _sum(num(ph.get(p)) for ph in phases) for p in (*PHASES, *STAGE_PHASES)},
            "elapsed_s": _sum(u["elapsed_s"] for u in used), "cpu_hours": _sum(u["cpu_hours"] for u in used),
            "gpu_hours": _sum(u["gpu_hours"] for u in used),
            "max_rss_bytes": max((u["max_rss_bytes"] for u in used if u["max_rss_bytes"] is not None), default=None)}


def total(rows: list[dict]) -> dict:
    """The sum of run rows (`run_cost`): attempts, queued, each phase, elapsed, hours; the largest RSS."""
    return {"runs": len(rows), "attempts": sum(r["attempts"] for r in rows),
            "unmeasured": sum(r["unmeasured"] for r in rows),
            **{k: _sum(r[k] for r in rows) for k in SUMMED},
            "phases": {p: _sum(r["phases"][p] for r in rows) for p in (*PHASES, *STAGE_PHASES)},
            "max_rss_bytes": max((r["max_rss_bytes"] for r in rows if r["max_rss_bytes"] is not None), default=None)}


def ancestry(store, idx, target: str) -> list[str]:
    """The runs whose work `target` holds, oldest first: an artifact's producing run (a run itself),
    then recursively the runs that produced their inputs (one producer per artifact, lineage/graph.py's
    walk), and the upstream runs whose outputs a run still waits for (a chain that stopped early)."""
    from jobs.errors import JobsError
    from lineage.graph import walk

    if target.startswith("art_") or ":" in target:
        art = store.resolve_artifact(target)
        arts, runs = [art], []
        if not idx.producer(art):
            raise JobsError(f"{target} was added (jobs add), not made by a run: it has no run's cost to sum")
    else:
        arts, runs = [], [idx.resolve_run(target)]
    found: set[str] = set()
    while True:
        nodes, _ = walk(idx, arts, runs, one_producer=True, downstream=False)
        found |= {n for n, kind in nodes.items() if kind == "run"}
        waiting = {ref["run"] for r in found for role, ref in store.run_spec(r).pending_inputs.items()
                   if role not in store.run(r).inputs and isinstance(ref, dict) and ref.get("run")} - found
        if not waiting:
            return sorted(found, key=lambda r: (store.run_spec(r).created or 0, r))
        runs = sorted(found | waiting)
