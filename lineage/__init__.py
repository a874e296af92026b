"""The lineage store: immutable records of runs and artifacts on a shared filesystem.

The record files are the truth; the SQLite index is a cache over them and can always be rebuilt.
"""
from lineage.store import Store

__all__ = ["Store"]
