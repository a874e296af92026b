"""Registering a big checkpoint: our store vs `dvc add` vs just reading the bytes, in one run.

Writes --size-gb of checkpoint-like shards (8 safetensors-sized files plus small JSON) once, reads
them so every tool starts from a warm page cache, then times:
  - cat > /dev/null          the floor: reading the bytes
  - sha256, all cores        the ceiling for SHA-256 here: one hashlib thread per core over the files
  - jobs register (cold)     Store.register: read-only, parallel SHA-256 manifest, record, ref
  - jobs register (warm)     the same files again: the stat cache skips every unchanged file
  - dvc add                  the real dvc CLI in a fresh git+dvc repo (md5, cache copy)

    .venv/bin/python bench/hash.py [--size-gb 2]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from lineage import Store  # noqa: E402

DVC = str(Path(sys.executable).parent / "dvc")


def make_shards(folder: Path, size_gb: float) -> int:
    folder.mkdir(parents=True)
    n, per = 8, int(size_gb * (1 << 30)) // 8
    block = os.urandom(16 << 20)
    for i in range(n):
        with open(folder / f"model-{i + 1:05d}-of-{n:05d}.safetensors", "wb") as f:
            left = per
            while left:
                f.write(block[: min(left, len(block))])
                left -= min(left, len(block))
    (folder / "config.json").write_text('{"hidden_size": 4096}')
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    return sum(p.stat().st_size for p in folder.iterdir())


def sha256_all_cores(folder: Path) -> None:
    def one(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
        return h.hexdigest()

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(one, sorted(folder.iterdir(), key=lambda p: -p.stat().st_size)))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hash-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        shards = tmp / "ckpt"
        total = make_shards(shards, args.size_gb)
        subprocess.run(f"cat {shards}/* > /dev/null", shell=True, check=True)  # warm the page cache

        rows = [("cat > /dev/null", timed(lambda: subprocess.run(f"cat {shards}/* > /dev/null", shell=True, check=True)))]
        rows.append((f"sha256, {os.cpu_count()} threads (ceiling)", timed(lambda: sha256_all_cores(shards))))

        dvc_repo = tmp / "dvcrepo"
        dvc_repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=dvc_repo, check=True)
        subprocess.run([DVC, "init", "-q"], cwd=dvc_repo, check=True)
        shutil.copytree(shards, dvc_repo / "ckpt", copy_function=os.link)  # same inodes, same warm pages

        store = Store.open(tmp / "store", create=True)
        rows.append(("jobs register (cold)", timed(lambda: store.register(shards, kind="model", name="bench/model"))))
        rows.append(("jobs register (warm stat cache)", timed(lambda: store.register(shards, kind="model", name="bench/model"))))
        rows.append(("dvc add", timed(lambda: subprocess.run([DVC, "add", "-q", "ckpt"], cwd=dvc_repo, check=True))))

    gib = total / (1 << 30)
    ours = dict(rows)["jobs register (cold)"]
    print(f"\n{gib:.2f} GiB in {8 + 2} files, warm page cache, {os.cpu_count()} cores\n")
    print("| tool | seconds | GiB/s | vs jobs register (cold) |\n|---|---|---|---|")
    for name, secs in rows:
        print(f"| {name} | {secs:.2f} | {gib / secs:.2f} | {secs / ours:.2f}x |")
    ceiling = dict(rows)[f"sha256, {os.cpu_count()} threads (ceiling)"]
    print(f"\ndvc add / ours: {dict(rows)['dvc add'] / ours:.1f}x (goal >= 4x); "
          f"ours reaches {ceiling / ours:.0%} of the SHA-256 ceiling (goal >= 90%)")


if __name__ == "__main__":
    main()
