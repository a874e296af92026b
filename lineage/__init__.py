"""The lineage store: immutable records of runs and artifacts on a shared filesystem.

The record files are the truth; the SQLite index is a cache over them and can always be rebuilt.
"""


def __getattr__(name: str):
    # Lazy, so that `from lineage.errors import ...` at CLI start does not pay for the store's imports.
    if name == "Store":
        from lineage.store import Store

        return Store
    raise AttributeError(name)


__all__ = ["Store"]
