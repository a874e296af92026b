"""Read a prep source: `hf://<dataset>` through `datasets.load_dataset`, or a local folder (or file)
of JSONL / Parquet through the same library, so both give the same rows and the same order.

A source is a mapping from the recipe: path, and optionally subset (the hub config name), split
(default train), sample (first rows only), mirror. Heavy imports stay inside the functions.

A mirror is a folder holding copies of hub dataset repositories as `<mirror>/<org>/<name>/`, each laid out
as on the hub (what `huggingface-cli download --repo-type dataset ORG/NAME --local-dir <mirror>/ORG/NAME`
writes: `data/<split>-*.parquet` and the like). With a mirror, `hf://ORG/NAME` is read from that copy by
the same `datasets.load_dataset` call, the folder given where the repository id was (the library finds
the splits from the file names as the hub does), and the hub is never asked: for machines without it.
"""
from __future__ import annotations

from pathlib import Path

from stages.contract import StageError

HF = "hf://"
FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def path_problem(path, where: str, mirror: str | None = None) -> str | None:
    """Why `path` cannot be a source (checked at submit), or None."""
    if not isinstance(path, str) or not path:
        return f"{where} must be hf://<dataset> or an absolute local path (got {path!r})"
    if path.startswith(HF) and len(path) == len(HF):
        return f"{where} names no dataset after hf://"
    if path.startswith(HF) and mirror:
        copy = mirrored(path, mirror)
        return None if copy.is_dir() else f"{where} {path}: the hub mirror has no copy of it ({copy} is not a folder)"
    if path.startswith(HF):
        return None
    p = Path(path)
    if not p.is_absolute():
        return f"{where} {path!r} must be absolute (the job does not run in this folder) or hf://<dataset>"
    if not p.exists():
        return f"{where} {path} does not exist"
    try:
        _local_files(p)
    except ValueError as e:
        return f"{where}: {e}"
    return None


def mirrored(path: str, mirror: str) -> Path:
    """Where the mirror keeps the repository `hf://ORG/NAME`."""
    return Path(mirror) / path[len(HF):]


def local(source: dict) -> bool:
    """Whether the source's rows are on this machine's file system (a path, or a hub dataset's mirror copy)."""
    return not source["path"].startswith(HF) or bool(source.get("mirror"))


def _local_files(p: Path) -> tuple[str, list[str]]:
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.suffix in FORMATS and f.is_file())
    kinds = {FORMATS.get(f.suffix) for f in files}
    if not files or None in kinds:
        raise StageError(f"{p} holds no .jsonl/.json/.parquet files")
    if len(kinds) > 1:
        raise StageError(f"{p} mixes JSONL and Parquet files: give each format its own source")
    return kinds.pop(), [str(f) for f in files]


def load(source: dict, split: str | None = None):
    """The source's rows: a `datasets.Dataset` (file order, or the hub's), or a list when a hub
    source is sampled."""
    import datasets

    split = split or source.get("split") or "train"
    path = source["path"]
    sample = source.get("sample")
    if path.startswith(HF) and sample is not None:     # a quick run streams its first rows, downloads nothing more
        return list(datasets.load_dataset(_repo(source), source.get("subset"), split=split,
                                          revision=_revision(source), streaming=True).take(int(sample)))
    if path.startswith(HF):
        ds = datasets.load_dataset(_repo(source), source.get("subset"), split=split, revision=_revision(source))
    else:
        kind, files = _local_files(Path(path))
        ds = datasets.load_dataset(kind, data_files=files, split="train")
    if sample is not None and sample < len(ds):
        ds = ds.select(range(int(sample)))
    return ds


def stream(source: dict):
    """The source's rows streamed in the order load() gives them, `sample` first rows only: for reading a
    few rows of a big source (nothing is downloaded whole, nothing is cached)."""
    import datasets

    if source["path"].startswith(HF):
        ds = datasets.load_dataset(_repo(source), source.get("subset"), split=source.get("split") or "train",
                                   revision=_revision(source), streaming=True)
    else:
        kind, files = _local_files(Path(source["path"]))
        ds = datasets.load_dataset(kind, data_files=files, split="train", streaming=True)
    return iter(ds.take(int(source["sample"])) if source.get("sample") is not None else ds)


def _repo(source: dict) -> str:
    """What `datasets.load_dataset` is given for a hub source: the repository id, or its mirror copy."""
    return str(mirrored(source["path"], source["mirror"])) if source.get("mirror") else source["path"][len(HF):]


def _revision(source: dict) -> str | None:
    return None if source.get("mirror") else source.get("revision")   # a copy holds the one revision it was made from


def shard(source: dict, index: int, shards: int):
    """Rows of slice `index` of `shards`, streamed: a task reads only what its token budget needs,
    never the whole hub dataset. Whole files per task when the source has at least `shards` files,
    else every shards-th row (each task then streams past the others' rows)."""
    import datasets

    path = source["path"]
    if path.startswith(HF):
        ds = datasets.load_dataset(_repo(source), source.get("subset"), split=source.get("split") or "train",
                                   revision=source.get("revision"), streaming=True)
    else:
        kind, files = _local_files(Path(path))
        ds = datasets.load_dataset(kind, data_files=files, split="train", streaming=True)
    if source.get("sample") is not None:
        ds = ds.take(int(source["sample"]))
    elif ds.num_shards >= shards:
        return iter(ds.shard(shards, index))
    return (row for i, row in enumerate(ds) if i % shards == index)
