"""Store upkeep the CLI offers: verify artifacts, delete what nothing keeps, prune training snapshots.

Each function prints through `echo` and returns the exit code; the logic lives in lineage/gc.py.
"""
from __future__ import annotations

import math
from typing import Callable

from jobs.errors import JobsError
from jobs.show import size


def verify(store, target: str | None, every: bool, echo: Callable[[str], None] = print) -> int:
    """Re-hash one artifact or all of them; damaged records are findings too."""
    from lineage.errors import Corrupt, Damaged
    from lineage.gc import verify_all

    if every:
        results = verify_all(store)
    elif target:
        art = store.resolve_artifact(target)
        try:
            store.verify(art)
            results = [(art, None)]
        except (Corrupt, Damaged) as e:  # reported below like --all
            results = [(art, str(e))]
    else:
        raise JobsError("say what to verify: an artifact (art_… or NAME:latest) or --all")
    bad = [(a, p) for a, p in results if p]
    for _, problem in bad:
        echo(f"CORRUPT {problem}")
    echo(f"verified {len(results)} artifact(s): {len(results) - len(bad)} ok, {len(bad)} corrupt")
    return 1 if bad else 0


def gc(store, older_than: float, yes: bool, echo: Callable[[str], None] = print) -> int:
    """Artifacts nothing keeps (no pin, no name's latest, no running run), older than `older_than` days."""
    from lineage.gc import candidates, collect

    if not math.isfinite(older_than) or older_than < 0:
        raise JobsError(f"--older-than {older_than}: give a number of days, 0 or more")
    victims = candidates(store, older_than)
    for c in victims:
        echo(f"{'delete' if yes else 'would delete'} {c.id[:20]} {c.kind:<12} {size(c.size):>10} {c.age_days:5.1f} d  {c.path}")
    if not yes:
        echo(f"{len(victims)} artifact(s), {size(sum(c.size for c in victims))} nothing keeps; run `jobs gc --yes` to delete them")
        return 0
    kept_back: list[tuple[str, str]] = []
    freed = collect(store, victims, kept_back)
    for art, why in kept_back:
        echo(f"kept {art[:20]}: cannot delete its files ({why}); their owner can")
    echo(f"deleted {len(victims) - len(kept_back)} artifact(s), {size(freed)} freed")
    return 1 if kept_back else 0


def prune_snapshots(store, keep: int, metric: str | None, higher_is_better: bool, yes: bool,
                    echo: Callable[[str], None] = print) -> int:
    """Training snapshots: keep the best `keep` per run and series by a metric, delete the rest."""
    from lineage.gc import top_k_victims

    if keep < 1:
        raise JobsError(f"--keep-top-k must be 1 or more: how many snapshots to keep per run (got {keep})")
    if not metric:
        raise JobsError("--keep-top-k needs --metric NAME (e.g. sft/loss; add --higher-is-better for accuracies)")
    from jobs.filters import check
    from lineage.layout import kept_snapshots

    known = {k for snaps in kept_snapshots(store.root).values() for sn in snaps for k in sn.metrics}
    if known:  # a store with no snapshot has nothing to prune, whatever the name
        check("--metric", metric, known)
    victims = top_k_victims(store, keep, metric, higher_is_better)
    for v in victims:
        echo(f"{'delete' if yes else 'would delete'} {v.run} {v.series} step {v.step} ({metric}={v.metrics[metric]:.4g})")
        if yes:
            for f in v.files:
                f.unlink(missing_ok=True)
    echo(f"{len(victims)} snapshot(s) {'deleted' if yes else f'beyond the best {keep}; --yes deletes them'}")
    return 0


def index(store, rebuild: bool, echo: Callable[[str], None] = print) -> int:
    """Bring the SQLite index up to date with the records; `rebuild` replaces a garbage index file too."""
    import time

    from lineage.index import Index

    t0 = time.perf_counter()
    idx = Index(store)
    idx.rebuild() if rebuild else idx.sync()
    where = idx.path or "memory (no writable cache folder)"
    echo(f"index {'rebuilt' if rebuild else 'synced'} in {time.perf_counter() - t0:.2f} s: {where}")
    return 0


def pin(store, run: str, unpin: bool, echo: Callable[[str], None] = print) -> int:
    """Keep a run's outputs from gc, or release them."""
    run_id = store.index().resolve_run(run)
    store.add_event(run_id, "pin", pinned=not unpin)
    echo(f"{run_id} {'unpinned' if unpin else 'pinned: gc keeps its outputs'}")
    return 0
