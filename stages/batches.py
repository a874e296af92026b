"""Batches as a pure function of (seed, step): resume needs no iterator state, ranks split evenly."""
from __future__ import annotations

import random


def indices(seed: int, step: int, n: int, global_batch: int, rank: int = 0, world: int = 1) -> list[int]:
    """This rank's share of step `step`'s global batch of example indices."""
    if global_batch % world:
        raise ValueError(f"global batch {global_batch} does not split over {world} ranks")
    rng = random.Random(seed * 1_000_003 + step)
    picked = [rng.randrange(n) for _ in range(global_batch)]
    per = global_batch // world
    return picked[rank * per:(rank + 1) * per]


def by_length(rows: list[list[int]]) -> dict[int, list[int]]:
    """Indices grouped by token length, for padding-free batches."""
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(len(r), []).append(i)
    return groups


def bucketed(seed: int, step: int, groups: dict[int, list[int]], global_batch: int,
             rank: int = 0, world: int = 1) -> list[int]:
    """A global batch drawn from one length bucket (chosen in proportion to its size), split by rank."""
    rng = random.Random(seed * 1_000_003 + step)
    lengths = sorted(groups)
    length = rng.choices(lengths, weights=[len(groups[k]) for k in lengths])[0]
    pool = groups[length]
    picked = [pool[rng.randrange(len(pool))] for _ in range(global_batch)]
    per = global_batch // world
    return picked[rank * per:(rank + 1) * per]
