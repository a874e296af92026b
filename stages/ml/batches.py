"""Batches as a pure function of (seed, step): resume needs no iterator state, ranks split evenly."""
from __future__ import annotations

import random

from stages.contract import StageError


def indices(seed: int, step: int, n: int, global_batch: int, rank: int = 0, world: int = 1) -> list[int]:
    """This rank's share of step `step`'s global batch of example indices."""
    if global_batch % world:
        raise StageError(f"global batch {global_batch} does not split over {world} ranks")
    rng = random.Random(seed * 1_000_003 + step)
    picked = [rng.randrange(n) for _ in range(global_batch)]
    per = global_batch // world
    return picked[rank * per:(rank + 1) * per]

