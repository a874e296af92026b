"""Identifiers: UUIDv7 run IDs (time-sortable, made without coordination) and short forms."""
from __future__ import annotations

import os
import time
import uuid


def uuid7() -> str:
    """A UUIDv7 (RFC 9562) string: 48 bits of Unix milliseconds, then 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76                      # version
    value |= ((rand >> 62) & 0xFFF) << 64   # rand_a, 12 bits
    value |= 0b10 << 62                     # variant
    value |= rand & ((1 << 62) - 1)         # rand_b, 62 bits
    return str(uuid.UUID(int=value))


def fanout(ident: str) -> str:
    """Two hex characters that spread IDs over 256 folders.

    An artifact ID is a digest, so its head is random and a short prefix finds its folder. The head
    of a UUIDv7 is a timestamp and would put every run in one folder, so runs use the tail.
    """
    if ident.startswith("art_"):
        return ident[4:6]
    return ident[-2:]


def run_key(spec: dict) -> str:
    """The identity of what a run computes (recipe, stage, module, config, inputs, code, environment
    and, where recorded, the CPU kernels):
    same key, same outputs expected; the run cache and `jobs reproduce` look runs up by it."""
    from lineage.hashing import hash_json

    keyed = {k: spec.get(k) for k in ("recipe", "stage", "module", "config", "inputs")}
    keyed["code"] = spec["code"]["snapshot"]
    keyed["environment"] = spec.get("container_image") or spec["environment"].get("digest")
    if spec["environment"].get("cpu_kernels"):   # other kernels, other floats (runtime/cpu.py)
        keyed["cpu_kernels"] = spec["environment"]["cpu_kernels"]
    return str(hash_json(keyed))
