"""Registering a big checkpoint: our store vs `dvc add` vs reading the bytes vs the SHA-256 ceiling.

Writes --size-gb of checkpoint-like files once (8 safetensors-like shards of random bytes plus a few
small JSON files) into a temporary folder (under /tmp, or under --dir), then times, in rounds:

  cat > /dev/null              the floor: only reading the bytes
  sha256 ... (ceiling)         plain SHA-256 of every file on all usable cores, several ways (hashlib
                               threads, hashlib processes, `openssl dgst` and `sha256sum` under
                               `xargs -P`); the fastest of them is the ceiling
  jobs register (cold)         lineage Store.register(path, kind="model", name=...) in this process,
                               into a store that has registered one small folder before: read-only
                               in place, parallel SHA-256 manifest, stat cache, record, name
  jobs register (warm)         the same folder again into the same store: the stat cache skips
                               every unchanged file
  dvc add                      the real dvc CLI, `dvc add ckpt` in a fresh `git init` + `dvc init`
                               repo that has added one small file before (MD5, then the default
                               cache copy); also with cache.type=hardlink (MD5, then a hard link)

dvc gets a folder of hard links to the same files (it moves its files into its cache); ours gets a
real copy, because registering makes a folder read-only in place and the store refuses a hard link to
a file outside the artifact (making it read-only would change that file too). Page cache: "warm" reads
every file once before each measurement, so every tool reads from memory; "cold" runs `sync` and
`echo 3 > /proc/sys/vm/drop_caches` before each measurement (needs root; skipped otherwise). Each
measurement is repeated --repeats times (the slow dvc add and sha256sum --slow-repeats times), tools
interleaved, and the best and median are reported.
Everything is removed at the end.

    .venv/bin/python bench/hash.py [--size-gb 2] [--repeats 3] [--cache both|warm|cold] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

# bench/lineage.py would shadow the lineage package when this folder is first on sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from lineage import Store  # noqa: E402

DVC = str(Path(sys.executable).parent / "dvc")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
OURS = "jobs register (cold stat cache)"
OURS_WARM = "jobs register (warm stat cache)"
DVC_ADD = "dvc add"
DVC_HARDLINK = "dvc add (cache.type=hardlink)"


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ---- the checkpoint -------------------------------------------------------------------------------
def make_checkpoint(folder: Path, size_gb: float, shards: int = 8) -> list[Path]:
    """`shards` safetensors-like files (8-byte header length, JSON header, random tensor bytes) + JSON."""
    folder.mkdir(parents=True)
    per = int(size_gb * (1 << 30)) // shards
    block = os.urandom(16 << 20)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensor = f"model.layers.{i}.mlp.weight"
        weight_map[tensor] = name
        left = per - 8 - 256  # tensor bytes after a header padded to 256 bytes
        header = json.dumps({"__metadata__": {"format": "pt"},
                             tensor: {"dtype": "BF16", "shape": [left // 2], "data_offsets": [0, left]}})
        header = header.encode().ljust(256)
        with open(folder / name, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
            k = 0
            while left > 0:
                chunk = struct.pack("<II", i, k) + block[8:]  # every 16 MiB differs: no two shards alike
                f.write(chunk[:left])
                left -= min(left, len(chunk))
                k += 1
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                                    "num_hidden_layers": shards, "torch_dtype": "bfloat16"}))
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.6}))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192, "pad_token": "<pad>"}))
    os.sync()  # no dirty pages left to write back while we measure
    return sorted(folder.iterdir())


def hardlink_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def remove(path: Path) -> None:
    """rmtree that also works on the read-only folders register leaves behind (when not root)."""
    def writable(func, p, _exc):
        os.chmod(os.path.dirname(p), 0o755)
        if os.path.isdir(p):
            os.chmod(p, 0o755)
        func(p)
    if path.exists():
        shutil.rmtree(path, onerror=writable)


# ---- the SHA-256 ceiling, several ways -----------------------------------------------------------
def sha256_readinto(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def sha256_file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def biggest_first(files: list[Path]) -> list[Path]:
    return sorted(files, key=lambda p: -p.stat().st_size)


# ---- one measurement ------------------------------------------------------------------------------
class Round:
    """Sets up each tool's folder (untimed), then times only the tool itself."""

    def __init__(self, work: Path, src: Path, files: list[Path], n: int, procs: ProcessPoolExecutor, env: dict):
        self.work, self.src, self.files, self.n, self.procs, self.env = work, src, files, n, procs, env

    def tools(self) -> dict:
        tools = {
            "cat > /dev/null": (None, self.cat),
            f"sha256: hashlib, {self.n} threads": (None, self.hashlib_threads),
            f"sha256: hashlib, {self.n} processes": (None, self.hashlib_processes),
        }
        if shutil.which("openssl"):
            tools[f"sha256: openssl dgst, xargs -P {self.n}"] = (None, self.xargs("openssl dgst -sha256"))
        if shutil.which("sha256sum"):
            tools[f"sha256: sha256sum, xargs -P {self.n}"] = (None, self.xargs("sha256sum"))
        tools[OURS] = (self.setup_ours, self.register)
        tools[OURS_WARM] = (None, self.register)  # right after OURS: same store, its stat cache is full
        tools[DVC_ADD] = (lambda i: self.setup_dvc(i, None), self.dvc_add)
        tools[DVC_HARDLINK] = (lambda i: self.setup_dvc(i, "hardlink"), self.dvc_add)
        return tools

    def cat(self) -> None:
        subprocess.run(["cat", *map(str, self.files)], stdout=subprocess.DEVNULL, check=True)

    def hashlib_threads(self) -> None:
        with ThreadPoolExecutor(self.n) as pool:
            list(pool.map(sha256_readinto, biggest_first(self.files)))

    def hashlib_processes(self) -> None:
        list(self.procs.map(sha256_file_digest, biggest_first(self.files)))

    def xargs(self, command: str):
        def run() -> None:
            listing = "\0".join(map(str, biggest_first(self.files))).encode()
            subprocess.run(["xargs", "-0", "-P", str(self.n), "-n", "1", *command.split()], input=listing,
                           stdout=subprocess.DEVNULL, check=True)
        return run

    def setup_ours(self, i: int) -> None:
        """A store that exists and has registered something before, as a user's store has."""
        folder = self.work / f"ours-{i}"
        self.ckpt = Path(shutil.copytree(self.src, folder / "ckpt"))   # not timed
        self.store = Store.open(folder / "store", create=True)
        (folder / "warmup").mkdir()
        (folder / "warmup" / "config.json").write_text("{}")
        self.store.register(folder / "warmup", kind="model", name="bench/warmup")

    def register(self) -> None:
        self.art = self.store.register(self.ckpt, kind="model", name="bench/model")

    def setup_dvc(self, i: int, cache_type: str | None) -> None:
        """A fresh git + dvc repo that has tracked one small file before; no analytics, no update check."""
        repo = self.work / f"dvc-{cache_type or 'default'}-{i}"
        hardlink_copy(self.src, repo / "ckpt")
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run([DVC, "init", "-q"], cwd=repo, check=True, env=self.env)
        config = "[core]\n    analytics = false\n    check_update = false\n"
        if cache_type:
            config += f"[cache]\n    type = {cache_type}\n"
        (repo / ".dvc" / "config").write_text(config)
        (repo / "warmup.json").write_text("{}")
        subprocess.run([DVC, "add", "-q", "warmup.json"], cwd=repo, check=True, env=self.env)
        self.dvc_repo = repo

    def dvc_add(self) -> None:
        subprocess.run([DVC, "add", "-q", "ckpt"], cwd=self.dvc_repo, check=True, env=self.env)


def settle(cache: str, files: list[Path]) -> None:
    """Bring the page cache to the state being measured; flush writes a previous tool left behind."""
    os.sync()
    if cache == "cold":
        DROP_CACHES.write_text("3\n")
    else:
        for p in files:
            with open(p, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass


def can_drop_caches() -> bool:
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.0, help="total size of the shards (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per tool and cache state (default 3)")
    ap.add_argument("--slow-repeats", type=int, default=2,
                    help="measurements of the slow rows, dvc add and sha256sum (default 2)")
    ap.add_argument("--cache", choices=["both", "warm", "cold"], default="both",
                    help="page cache state(s) to measure; cold needs root (default both)")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temporary work folder (default /tmp)")
    ap.add_argument("--no-dvc", action="store_true", help="skip the dvc rows")
    args = ap.parse_args()

    states = ["warm", "cold"] if args.cache == "both" else [args.cache]
    notes = []
    if "cold" in states and not can_drop_caches():
        notes.append(f"cold page cache not measured: cannot write {DROP_CACHES} (run as root)")
        states = [s for s in states if s != "cold"]
        if not states:
            print(notes[0], file=sys.stderr)
            return 0
    if not args.no_dvc and not Path(DVC).exists():
        notes.append(f"dvc rows skipped: no {DVC} (pip install dvc)")
        args.no_dvc = True
    n = cores()
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[float]] = {}
    parent = args.dir or Path("/tmp")
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-hash-", dir=parent))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_STUDIO_OFFLINE": "1",
           "DVC_SITE_CACHE_DIR": str(work / "dvc-site-cache")}
    try:
        t0 = time.perf_counter()
        files = make_checkpoint(work / "src", args.size_gb)
        total = sum(p.stat().st_size for p in files)
        made = time.perf_counter() - t0
        with ProcessPoolExecutor(n) as procs:
            list(procs.map(abs, range(n)))  # start the workers before timing them
            r = Round(work, work / "src", files, n, procs, env)
            tools = {k: v for k, v in r.tools().items() if not (args.no_dvc and k.startswith("dvc"))}
            serial = 0
            for i in range(args.repeats):
                for cache in states:
                    for name, (setup, run) in tools.items():
                        if i >= args.slow_repeats and (name == DVC_ADD or "sha256sum" in name):
                            continue
                        serial += 1
                        if setup:
                            setup(serial)
                        settle(cache, files)
                        t = time.perf_counter()
                        run()
                        results.setdefault((name, cache), []).append(time.perf_counter() - t)
                        if name.startswith("dvc"):
                            remove(r.dvc_repo)  # 2 GB of cache copy per repeat
                    for p in work.glob("ours-*"):
                        remove(p)
            # Not timed: our digests are plain SHA-256 of each file.
            r.setup_ours(0)
            r.register()
            manifest = {e["path"]: e["digest"] for e in r.store.artifact(r.art)["manifest"]}
            agree = all(manifest[p.name] == "sha256:" + sha256_readinto(p) for p in files)
    finally:
        remove(work)
    load_after = os.getloadavg()

    gib = total / (1 << 30)
    print(f"\n{gib:.2f} GiB in {len(files)} files ({sum(p.suffix == '.safetensors' for p in files)} shards), "
          f"{n} usable cores, best and median of {args.repeats} runs ({min(args.repeats, args.slow_repeats)} for dvc add "
          f"and sha256sum; generated in {made:.1f} s)")
    print("page cache: warm = every file read once right before each measurement, so all tools read from memory"
          + ("; cold = sync + drop_caches right before each measurement" if "cold" in states else ""))
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after: "
          "other work on this machine shares the cores\n")
    print("| tool | page cache | best s | median s | GiB/s (best) | time / ours (best) |")
    print("|---|---|---:|---:|---:|---:|")
    summary = []
    for cache in states:
        ours = min(results[(OURS, cache)])
        for (name, c), xs in results.items():
            if c != cache:
                continue
            best = min(xs)
            rate = "(reads nothing)" if name == OURS_WARM else f"{gib / best:.2f}"
            print(f"| {name} | {cache} | {best:.3f} | {statistics.median(xs):.3f} | {rate} | {best / ours:.2f}x |")
        sha = {name: min(xs) for (name, c), xs in results.items() if c == cache and name.startswith("sha256")}
        best_sha = min(sha, key=sha.get)
        line = f"{cache} cache: "
        # Like for like is dvc with hard links: neither side copies the bytes, both hash them once.
        if (DVC_HARDLINK, cache) in results:
            line += f"dvc add with cache.type=hardlink / ours = {min(results[(DVC_HARDLINK, cache)]) / ours:.1f}x (goal >= 4x)"
        if (DVC_ADD, cache) in results:
            line += f" [dvc add in its default mode also copies into its cache: {min(results[(DVC_ADD, cache)]) / ours:.1f}x]"
        share = sha[best_sha] / ours
        if share > 1.0:   # ours ran faster than every plain way: the fastest of them bounds nothing
            line += (f"; ours took {1 / share:.0%} of the time of the fastest plain SHA-256 row ({best_sha}), "
                     "so no row here is a ceiling and no share of one is claimed (goal >= 90%: not measurable)")
        else:
            line += f"; ours reaches {share:.0%} of the fastest plain SHA-256 row, the ceiling ({best_sha}; goal >= 90%)"
        summary.append(line)
    print()
    print("\n".join(summary + notes))
    print(f"our manifest digests equal plain SHA-256 of each file: {'yes' if agree else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
