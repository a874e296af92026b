"""`jobs export`: an artifact into a DVC repository, or a run as OpenLineage events."""
from __future__ import annotations

import sys
from pathlib import Path

from jobs.errors import JobsError
from lineage.records import strict_json


def command(store, ident: str, dvc: str | None = None, name: str | None = None, openlineage: bool = False,
            out: str | None = None, echo=print) -> int:
    from lineage import exports

    if name is not None and not dvc:
        raise JobsError("--name goes with --dvc DIR")
    if out is not None and not openlineage:
        raise JobsError("--out goes with --openlineage")
    if dvc:
        dvc_file = exports.export_dvc(store, store.resolve_artifact(ident), Path(dvc), name)
        echo(f"wrote {dvc_file} (then: git add {dvc_file.name} .gitignore && dvc push)")
        return 0
    if not openlineage:
        raise JobsError("say what to export: ART --dvc DIR, or RUN --openlineage [--out FILE]")
    target = Path(out) if out else None
    if target is not None and (not target.parent.is_dir() or target.is_dir()):
        raise JobsError(f"--out {target}: {'is a folder' if target.is_dir() else 'its folder does not exist'}")
    events = exports.openlineage_events(store, store.index().resolve_run(ident))
    text = "".join(strict_json(e, sort_keys=True) + "\n" for e in events)
    if target is None:
        sys.stdout.write(text)
        return 0
    from lineage.records import atomic_write

    atomic_write(target, text.encode())
    echo(f"wrote {len(events)} OpenLineage event(s) to {out}")
    return 0
