"""Exports of the lineage to other tools: a DVC-tracked copy of an artifact, OpenLineage run events.

DVC: the copy's cache objects, its `.dir` listing and the numbers in the `.dvc` file come from
dvc-data (the library DVC itself writes its cache with), imported only inside `export_dvc`, so the
real `dvc status`, `dvc push` and `dvc pull` accept them without `dvc add`.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from lineage.errors import LineageError, show_path
from lineage.records import atomic_write
from lineage.states import RunState
from lineage.store import Store

OPENLINEAGE_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/definitions/RunEvent"
PRODUCER = "https://github.com/jobs-llm/jobs"


EXPORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def export_dvc(store: Store, art_id: str, repo: Path, name: str | None = None) -> Path:
    """Put the artifact at repo/<name> with repo/<name>.dvc and DVC cache objects; returns the .dvc path.

    `name` is one folder name (letters, digits, `_.-`), so nothing is written outside `repo`, and
    nothing is written through a link.
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise LineageError(f"--dvc {show_path(repo)}: no such folder (run `git init && dvc init` in a folder first)")
    if not (repo / ".dvc").is_dir() or (repo / ".dvc").is_symlink():
        raise LineageError(f"{show_path(repo)} is not a DVC repository (run `git init && dvc init` there first)")
    if name is not None and (not EXPORT_NAME.match(name) or ".." in name):
        raise LineageError(f"bad --name {show_path(name)!r}: one folder name of letters, digits and _.- "
                           "(it is created inside the DVC repository)")
    record = store.artifact(art_id)
    src = Path(record["path"])
    store.verify(art_id)  # never export bytes that no longer match the record
    name = name or (record.get("name") or art_id).replace("/", "-")
    dest = repo / name
    for target in (dest, repo / f"{name}.dvc"):
        if os.path.lexists(target):
            raise LineageError(f"{show_path(target)} exists already: pass another --name or remove it")
    if (repo / ".gitignore").is_symlink() or (repo / ".dvc" / "cache").is_symlink():
        raise LineageError(f"{show_path(repo)}: .gitignore or .dvc/cache is a symbolic link; refusing to write through it")
    try:
        import yaml
        from dvc_data.hashfile.build import build
        from dvc_data.hashfile.db import HashFileDB
        from dvc_data.hashfile.transfer import transfer
        from dvc_objects.fs.local import LocalFileSystem
    except ImportError:
        raise LineageError("--dvc needs dvc-data, the library DVC writes its cache with: "
                           "pip install dvc (or dvc-data) in this environment") from None
    for e in record["manifest"]:
        file = src / e["path"] if record.get("is_dir", True) else src
        out = dest / e["path"]
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, out)
    fs = LocalFileSystem()
    odb = HashFileDB(fs, os.fspath(repo / ".dvc" / "cache" / "files" / "md5"))
    staging, meta, obj = build(odb, os.fspath(dest), fs, "md5")
    transfer(staging, odb, {obj.hash_info}, hardlink=False, shallow=False)
    dvc_file = repo / f"{name}.dvc"
    out = {"md5": obj.hash_info.value, "size": meta.size, "nfiles": meta.nfiles, "hash": "md5", "path": name}
    atomic_write(dvc_file, yaml.safe_dump({"outs": [out], "meta": {"jobs_artifact": art_id}}, sort_keys=False).encode(),
                 mode=0o644)
    ignore = repo / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    if f"/{name}" not in lines:
        atomic_write(ignore, ("\n".join([*lines, f"/{name}"]) + "\n").encode(), mode=0o644)
    return dvc_file


def openlineage_events(store: Store, run_id: str) -> list[dict]:
    """START and COMPLETE (or FAIL / ABORT) RunEvents for one run, per the OpenLineage 2 spec."""
    view = store.run(run_id)
    spec = view.spec
    namespace = f"jobs://{store.root}"

    def dataset(art: str, role: str) -> dict:
        rec = store.artifact(art)
        return {
            "namespace": namespace, "name": art,
            "facets": {"jobs_artifact": {"_producer": PRODUCER, "_schemaURL": f"{PRODUCER}#artifact",
                                         "kind": rec["kind"], "role": role, "size": rec["size"],
                                         "files": len(rec["manifest"]), "path": rec["path"]}},
        }

    def iso(ts: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"

    job = {"namespace": namespace, "name": f"{spec.recipe}.{spec.stage}"}
    run_facets = {"jobs_run": {"_producer": PRODUCER, "_schemaURL": f"{PRODUCER}#run",
                               "code": spec.code.get("git_sha"),
                               "code_snapshot": spec.code.get("snapshot"),
                               "environment": spec.container_image or spec.environment.get("digest"),
                               "run_key": spec.run_key, "config": spec.config}}
    inputs = [dataset(a, r) for r, a in sorted(view.inputs.items())]
    start = view.attempts[0]["start"] if view.attempts and view.attempts[0].get("start") else spec.created
    events = [{"eventType": "START", "eventTime": iso(start), "run": {"runId": run_id, "facets": run_facets},
               "job": job, "inputs": inputs, "outputs": [], "producer": PRODUCER, "schemaURL": OPENLINEAGE_SCHEMA}]
    end_type = {RunState.SUCCEEDED: "COMPLETE", RunState.FAILED: "FAIL", RunState.CANCELLED: "ABORT"}.get(view.state)
    if end_type:
        events.append({"eventType": end_type, "eventTime": iso(view.updated), "run": {"runId": run_id},
                       "job": job, "inputs": inputs,
                       "outputs": [dataset(a, n) for n, a in sorted(view.outputs.items())],
                       "producer": PRODUCER, "schemaURL": OPENLINEAGE_SCHEMA})
    return events
