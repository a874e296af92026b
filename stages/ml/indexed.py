"""Megatron's indexed dataset (MMIDIDX): one `.bin` of token ids and one `.idx` describing them.

Written from the format megatron-core's `megatron.core.datasets.indexed_dataset.IndexedDataset` reads
(checked against megatron-core 0.16.1 in tests/stages/test_prep.py), so prep needs no megatron-core:

    .bin  every sequence's token ids back to back, in the index's dtype
    .idx  b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code, <Q sequence count, <Q document count,
          int32[sequence count] lengths, int64[sequence count] byte offsets into .bin,
          int64[document count] document boundaries (0, then the sequence count after each document)

One document = one sequence here (a tokenized text, EOS appended by the caller). All integers are
little-endian. uint16 holds vocabularies under 65,500 tokens (megatron-core's own choice), else int32.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from stages.contract import StageError

HEADER = b"MMIDIDX\x00\x00"
CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6, np.float32: 7, np.uint16: 8}


def dtype_for(vocab_size: int):
    """The token dtype megatron-core picks for a vocabulary of this size."""
    return np.uint16 if vocab_size < 65500 else np.int32


class IndexedWriter:
    """Append documents, then `close()`: writes `<prefix>.bin` and `<prefix>.idx` (temp + rename)."""

    def __init__(self, prefix: Path, dtype):
        self.prefix, self.dtype = Path(prefix), dtype
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._tmp_bin = self.prefix.with_name(self.prefix.name + ".bin.tmp")
        self._bin = open(self._tmp_bin, "wb")
        self.lengths: list[int] = []
        self.tokens = 0

    def add(self, ids) -> None:
        arr = np.asarray(ids, dtype=self.dtype)
        if arr.ndim != 1:
            raise StageError("a document is a flat list of token ids")
        if len(ids) and (min(ids) < np.iinfo(self.dtype).min or max(ids) > np.iinfo(self.dtype).max):
            raise StageError(f"token id out of range for {np.dtype(self.dtype).name}")
        self._bin.write(arr.tobytes(order="C"))
        self.lengths.append(len(arr))
        self.tokens += len(arr)

    def close(self) -> dict:
        self._bin.close()
        count = len(self.lengths)
        lengths = np.asarray(self.lengths, dtype=np.int32)
        pointers = np.zeros(count, dtype=np.int64)
        if count:
            pointers[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * np.dtype(self.dtype).itemsize
        documents = np.arange(count + 1, dtype=np.int64)    # one sequence per document
        tmp_idx = self.prefix.with_name(self.prefix.name + ".idx.tmp")
        with open(tmp_idx, "wb") as f:
            f.write(HEADER)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", CODES[self.dtype]))
            f.write(struct.pack("<Q", count))
            f.write(struct.pack("<Q", len(documents)))
            f.write(lengths.astype("<i4").tobytes())
            f.write(pointers.astype("<i8").tobytes())
            f.write(documents.astype("<i8").tobytes())
        os.replace(self._tmp_bin, Path(str(self.prefix) + ".bin"))   # a name may hold dots: no with_suffix
        os.replace(tmp_idx, Path(str(self.prefix) + ".idx"))
        return {"documents": count, "tokens": self.tokens}


def read(prefix: Path) -> list[np.ndarray]:
    """Every document of `<prefix>.bin/.idx` (our own reader: manifests and quick checks, not training)."""
    raw = Path(str(prefix) + ".idx").read_bytes()
    if raw[:9] != HEADER or struct.unpack("<Q", raw[9:17])[0] != 1:
        raise StageError(f"{prefix}.idx is not an MMIDIDX v1 index")
    code = raw[17]
    dtype = {v: k for k, v in CODES.items()}[code]
    count, _ = struct.unpack("<QQ", raw[18:34])
    lengths = np.frombuffer(raw, dtype="<i4", count=count, offset=34)
    pointers = np.frombuffer(raw, dtype="<i8", count=count, offset=34 + 4 * count)
    data = np.fromfile(Path(str(prefix) + ".bin"), dtype=dtype)
    size = np.dtype(dtype).itemsize
    return [data[p // size: p // size + n] for p, n in zip(pointers, lengths)]


class Reader:
    """Documents of `<prefix>.bin/.idx` memory-mapped, read one at a time (what training reads: a
    shard is never loaded whole). Same format checks as `read`; `reader[i]` is document i's ids."""

    def __init__(self, prefix: Path):
        raw = np.memmap(Path(str(prefix) + ".idx"), dtype=np.uint8, mode="r")
        if bytes(raw[:9]) != HEADER or struct.unpack("<Q", bytes(raw[9:17]))[0] != 1:
            raise StageError(f"{prefix}.idx is not an MMIDIDX v1 index")
        codes = {v: k for k, v in CODES.items()}
        if int(raw[17]) not in codes:
            raise StageError(f"{prefix}.idx has an unknown dtype code {int(raw[17])}")
        self.dtype = codes[int(raw[17])]
        count, _ = struct.unpack("<QQ", bytes(raw[18:34]))
        self.lengths = np.frombuffer(raw, dtype="<i4", count=count, offset=34)
        self.pointers = np.frombuffer(raw, dtype="<i8", count=count, offset=34 + 4 * count)
        bin_path = Path(str(prefix) + ".bin")
        size = bin_path.stat().st_size
        want = int(self.pointers[-1]) + int(self.lengths[-1]) * np.dtype(self.dtype).itemsize if count else 0
        if size != want:
            raise StageError(f"{bin_path} holds {size} bytes, its index describes {want}")
        self._bin = np.memmap(bin_path, dtype=self.dtype, mode="r") if size else np.zeros(0, dtype=self.dtype)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // np.dtype(self.dtype).itemsize
        return np.asarray(self._bin[start:start + int(self.lengths[i])])
