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

# The spec 2-0-2 keeps its definitions under $defs: these JSON pointers resolve in the published files.
OPENLINEAGE_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
ERROR_FACET_SCHEMA = "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
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
    if os.path.lexists(repo / f"{name}.dvc") or os.path.lexists(dest):
        if _replaceable(store, repo, name, art_id) == "same":
            return repo / f"{name}.dvc"
        _remove_export(dest)
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


def _replaceable(store: Store, repo: Path, name: str, art_id: str) -> str:
    """An earlier export under `name` may be updated to another version of the same artifact name,
    when its folder is still exactly what was exported; "same" when it already holds `art_id`.
    Anything else there (another name's artifact, a file edited since, not ours) is refused."""
    import yaml

    dvc_file, dest = repo / f"{name}.dvc", repo / name
    taken = f"{show_path(dvc_file if os.path.lexists(dvc_file) else dest)} exists already"
    try:
        old = (yaml.safe_load(dvc_file.read_bytes()) or {}).get("meta", {}).get("jobs_artifact")
    except (OSError, yaml.YAMLError, AttributeError):
        old = None
    if not isinstance(old, str) or dvc_file.is_symlink() or dest.is_symlink():
        raise LineageError(f"{taken} and was not exported from a store: pass another --name or remove it")
    if old == art_id:
        return "same"
    ours = _base_names(store, art_id)
    theirs = _base_names(store, old)
    if not ours & theirs:
        raise LineageError(f"{taken} and holds {old[:16]} ({', '.join(sorted(theirs)) or 'no name'}), not a version "
                           f"of {', '.join(sorted(ours)) or art_id[:16]}: pass another --name")
    changed = _changed_files(store, old, dest)
    if changed:
        raise LineageError(f"{show_path(dest)} changed since {old[:16]} was exported ({changed}): commit or move "
                           "your edits first; nothing was replaced")
    return "update"


def _base_names(store: Store, art_id: str) -> set[str]:
    try:
        return {n.rsplit(":", 1)[0] for n in store.index().names_of(art_id)}
    except LineageError:
        return set()


def _changed_files(store: Store, art_id: str, dest: Path) -> str | None:
    """The first file of the exported folder that differs from the artifact's manifest, or None."""
    from lineage.hashing import ALGORITHM
    import hashlib

    try:
        manifest = {e["path"]: e["digest"] for e in store.artifact(art_id)["manifest"]}
    except LineageError:
        return "its artifact is no longer in the store"
    if not dest.is_dir():
        return "the folder is missing"
    here = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink()}
    for extra in sorted(here - set(manifest)):
        return f"{extra} was added"
    for rel, digest in sorted(manifest.items()):
        path = dest / rel
        if rel not in here or path.is_symlink():
            return f"{rel} was removed"
        if f"{ALGORITHM}:{hashlib.sha256(path.read_bytes()).hexdigest()}" != digest:
            return f"{rel} was edited"
    return None


def _remove_export(dest: Path) -> None:
    """The earlier export's folder (its bytes stay in DVC's cache, where `dvc checkout` finds them)."""
    if dest.is_dir():
        shutil.rmtree(dest)


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

    job = {"namespace": namespace, "name": f"{spec['recipe']}.{spec['stage']}"}
    run_facets = {"jobs_run": {"_producer": PRODUCER, "_schemaURL": f"{PRODUCER}#run",
                               "code": spec.get("code", {}).get("git_sha"),
                               "code_snapshot": spec.get("code", {}).get("snapshot"),
                               "environment": spec.get("container_image") or spec.get("environment", {}).get("digest"),
                               "run_key": spec.get("run_key"), "config": spec["config"]}}
    inputs = [dataset(a, r) for r, a in sorted(view.inputs.items())]
    start = view.attempts[0]["start"] if view.attempts and view.attempts[0].get("start") else spec["created"]
    events = [{"eventType": "START", "eventTime": iso(start), "run": {"runId": run_id, "facets": run_facets},
               "job": job, "inputs": inputs, "outputs": [], "producer": PRODUCER, "schemaURL": OPENLINEAGE_SCHEMA}]
    end_type = {RunState.SUCCEEDED: "COMPLETE", RunState.FAILED: "FAIL", RunState.CANCELLED: "ABORT"}.get(view.state)
    if end_type:
        end_run: dict = {"runId": run_id}
        if view.state == RunState.FAILED:   # the reason the record holds, as the spec's error facet
            why = view.reason or next((a.get("error") for a in reversed(view.attempts) if a.get("error")), None)
            end_run["facets"] = {"errorMessage": {"_producer": PRODUCER, "_schemaURL": ERROR_FACET_SCHEMA,
                                                  "message": why or "failed (no reason recorded)",
                                                  "programmingLanguage": "PYTHON"}}
        events.append({"eventType": end_type, "eventTime": iso(view.updated), "run": end_run,
                       "job": job, "inputs": inputs,
                       "outputs": [dataset(a, n) for n, a in sorted(view.outputs.items())],
                       "producer": PRODUCER, "schemaURL": OPENLINEAGE_SCHEMA})
    return events
