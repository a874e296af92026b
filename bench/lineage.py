"""The store at 100k runs: registering a version and resolving `NAME:latest` cost the same at any size.

Builds (once, then reused) a store of --runs runs as the launcher leaves them: each run has its
record, six events (QUEUED, attempt start, RUNNING, attempt end, outputs, SUCCEEDED), an output
folder under runs/<run>/outputs/model made read-only, its artifact record, and a version of ONE
name, so that name has --runs versions. The bulk is written straight to disk in the store's own
layout and record shapes (no fsync, no temp files, no stat cache: a disposable store), in chunks
by two processes; run and event IDs are derived from the run's number, so a build interrupted
anywhere resumes where it stopped (`--fresh` starts over). The bench then checks that its records
have the keys the store's own writes have, and times, with the store's real code:

    register one more version (Store.register, fsync on), resolve NAME:latest and NAME:v50000
    (Store.resolve_artifact, what `jobs submit` calls for an input), against the old way, which
    listed the name's folder for each of them (refs.versions, still used for listings).

The bulk build is a fixture, not the store's write path: its seconds say nothing about how fast
runs are registered. What the store's own code sustains at this size is timed apart: --registers
Store.register calls in a row (a small folder each, a new version of NAME, fsync on), as a rate.

With --cli it also times the read commands as before: `jobs index --rebuild`, then with a warm index
`jobs list`, `jobs lineage` of the end of a 40-run chain, and `jobs show`.

    .venv/bin/python bench/lineage.py [--runs 100000] [--fresh] [--repeats 21] [--cli]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

# This file's name is the store package's name: keep bench/ off the import path so `lineage` is ours.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

NAME = "bench/sft/model"
CHUNK = 2000
DEPTH = 40  # runs 0..39 form a chain
BASE_MS = 1_760_000_000_000  # runs are a minute apart from here on
PACKAGES = {f"package-{k:03d}": f"{k % 7}.{k % 13}.{k % 5}" for k in range(150)}  # a venv's listing


def det_uuid7(ms: int, seed: str) -> str:
    """A UUIDv7 like lineage.ids.uuid7, its random bits from `seed`: a rebuilt chunk gets the same IDs."""
    rand = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=10).digest(), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | ((rand >> 62) & 0xFFF) << 64 | 0b10 << 62
    return str(uuid.UUID(int=value | rand & ((1 << 62) - 1)))


def put(path: str, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def run_parts(i: int, shared: dict) -> dict:
    """What run number `i` leaves in the store, as the launcher and Store write it."""
    from lineage import hashing
    from lineage.records import canonical_json

    ms = BASE_MS + i * 60_000
    t = ms / 1000
    run = det_uuid7(ms, f"run{i}")
    inputs = {"data": shared["data"]}
    if 0 < i < DEPTH:  # the first runs form a chain, each fine-tuning the one before: `jobs lineage` walks it
        inputs["model"] = run_parts(i - 1, shared)["art"]
    spec = {"id": run, "created": t, "recipe": "bench", "stage": "sft", "module": "stages.sft",
            "config": {**shared["config"], "seed": i}, "inputs": inputs, "pending_inputs": {},
            "input_kinds": {"data": "sft-data"}, "outputs": {"model": "model"},
            "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 2, "time": "01:00:00"},
            "container": None, "ray": False, "executor": "local", "code": shared["code"],
            "environment": shared["environment"]}
    spec["run_key"] = str(hashing.hash_json({k: spec[k] for k in ("recipe", "stage", "module", "config", "inputs")}))
    body = canonical_json({"step": 100, "loss": round(2.0 / (1 + i % 97), 6), "run": i}) + b"\n"
    entry = {"path": "model.json", "size": len(body), "digest": str(hashing.hash_bytes(body)), "mode": 0o644}
    art = hashing.artifact_id([entry])
    events = [("status", {"state": "QUEUED"}),
              ("attempt", {"attempt": 1, "host": "bench", "pid": 1000 + i % 30000, "start": t + 1}),
              ("status", {"state": "RUNNING"}),
              ("attempt", {"attempt": 1, "end": t + 50, "exit": 0}),
              ("outputs", {"outputs": {"model": art}}),
              ("status", {"state": "SUCCEEDED"})]
    return {"run": run, "t": t, "spec": spec, "body": body, "entry": entry, "art": art, "events": events}


def build_chunk(args: tuple[str, str, int, int]) -> int:
    """Runs [lo, hi) and versions lo+1..hi of NAME, then a marker; safe to run again after a kill."""
    from lineage.ids import fanout
    from lineage.records import canonical_json

    root, progress, lo, hi = args
    shared = json.loads(Path(progress, "shared.json").read_text())
    rec, name_dir = os.path.join(root, "records"), os.path.join(root, "refs", NAME)
    for i in range(lo, hi):
        p = run_parts(i, shared)
        run, t, art = p["run"], p["t"], p["art"]
        put(f"{rec}/run/{fanout(run)}/{run}.json", canonical_json(p["spec"]) + b"\n")
        evdir = f"{rec}/event/{fanout(run)}/{run}"
        os.makedirs(evdir, exist_ok=True)
        for k, (kind, data) in enumerate(p["events"]):
            ev = det_uuid7(int(t * 1000) + 1000 * k, f"ev{i}.{k}")
            put(f"{evdir}/{ev}.json", canonical_json({"id": ev, "run": run, "kind": kind, "time": t + k, **data}) + b"\n")
        out = f"{root}/runs/{run}/outputs/model"
        if os.path.lexists(out):  # a chunk cut short earlier: make its folder writable again
            os.chmod(out, 0o755)
        os.makedirs(out, exist_ok=True)
        if os.path.lexists(f"{out}/model.json"):
            os.unlink(f"{out}/model.json")
        put(f"{out}/model.json", p["body"], 0o444)
        os.chmod(out, 0o555)
        record = {"id": art, "kind": "model", "path": out, "is_dir": True, "manifest": [p["entry"]],
                  "size": p["entry"]["size"], "producer": run, "name": NAME, "metadata": {}, "created": t + 49}
        put(f"{rec}/artifact/{art[4:6]}/{art}.json", canonical_json(record) + b"\n")
        ref = {"name": NAME, "version": i + 1, "artifact": art, "run": run, "time": t + 49}
        put(f"{name_dir}/v{i + 1:06d}.json", canonical_json(ref) + b"\n")
    Path(progress, f"chunk-{lo:07d}.done").touch()
    return hi - lo


def writable_tree(path: Path) -> None:
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)


def build(root: Path, progress: Path, runs: int) -> tuple[float, bool]:
    """Writes every chunk not yet marked done; returns the seconds this call spent and whether it resumed."""
    from lineage import Store, refs

    t0 = time.perf_counter()
    store = Store.open(root, create=True)
    progress.mkdir(parents=True, exist_ok=True)
    shared_file = progress / "shared.json"
    resumed = shared_file.exists()  # an earlier build got this far and was cut short
    if not resumed:
        # Two real artifacts every run points at: its input data and its code snapshot.
        seeds = root.parent / "seed-artifacts"
        for what in ("data", "code"):
            d = seeds / what
            if not d.exists():
                d.mkdir(parents=True)
                for k in range(3):
                    (d / f"{what}{k}.txt").write_text(f"{what} {k}\n" * 100)
        data = store.register(seeds / "data", kind="sft-data", name="bench/data/sft")
        code = store.register(seeds / "code", kind="code")
        shared = {"data": data,
                  "code": {"git_sha": "0" * 40, "dirty": False, "snapshot": code, "files": 3, "root": "/src"},
                  "environment": {"kind": "python", "python": "3.11.7", "digest": "sha256:" + "1" * 64,
                                  "packages": PACKAGES},
                  "config": {"lr": 1e-5, "batch_size": 8, "epochs": 1, "max_seq_len": 512, "model": "tiny",
                             "optimizer": {"name": "adamw", "betas": [0.9, 0.95], "weight_decay": 0.1}}}
        shared_file.write_text(json.dumps(shared))
    for kind in ("run", "event", "artifact"):
        for k in range(256):
            (store.records / kind / f"{k:02x}").mkdir(parents=True, exist_ok=True)
    (store.refs / NAME).mkdir(parents=True, exist_ok=True)
    todo = [(str(root), str(progress), lo, min(lo + CHUNK, runs)) for lo in range(0, runs, CHUNK)
            if not (progress / f"chunk-{lo:07d}.done").exists()]
    if todo:
        print(f"building {len(todo)} of {-(-runs // CHUNK)} chunks of {CHUNK} runs into {root}", flush=True)
        with mp.Pool(2) as pool:
            for n, _ in enumerate(pool.imap_unordered(build_chunk, todo), 1):
                if n % 10 == 0:
                    print(f"  {n}/{len(todo)} chunks, {time.perf_counter() - t0:.0f} s", flush=True)
    # What the last refs.add would have left: the hint, and the refs folder touched for the index.
    (store.refs / NAME / refs.HINT).write_text(f"{runs}\n")
    os.utime(store.refs)
    return time.perf_counter() - t0, resumed


def median_ms(fn, repeats: int) -> tuple[float, float]:
    xs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1000, min(xs) * 1000


def old_resolve(store, alias: str) -> str:
    """The resolution before the hint: list the folder, take the highest, read it."""
    from lineage import refs

    name, tag = alias.split(":")
    known = refs.versions(store.refs, name)
    version = known[-1] if tag == "latest" else int(tag[1:])
    assert version in known
    return refs.read(store.refs / name / f"v{version:06d}.json")["artifact"]


def old_add(store, art: str) -> int:
    """The registration of a version before the hint: list the folder, then link the next number."""
    from lineage import refs
    from lineage.records import write_record

    version = (refs.versions(store.refs, NAME) or [0])[-1] + 1
    while not write_record(store.refs / NAME / f"v{version:06d}.json",
                           {"name": NAME, "version": version, "artifact": art, "run": None, "time": time.time()},
                           exclusive=True):
        version += 1
    return version


def probes(fn) -> int:
    """How many single-file existence checks `fn` makes (on Lustre each is a metadata round trip)."""
    real, count = os.path.lexists, [0]

    def counting(p):
        count[0] += 1
        return real(p)

    os.path.lexists = counting
    try:
        fn()
    finally:
        os.path.lexists = real
    return count[0]


def disk_usage(path: Path) -> tuple[int, int]:
    """(bytes on disk, inodes) under `path`, by du."""
    size = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]
    inodes = subprocess.run(["du", "-s", "--inodes", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]
    return int(size), int(inodes)


def cli_rows(root: Path, deepest: str, repeats: int) -> list[tuple[str, list[float]]]:
    """The read commands on this store, as a user runs them (a subprocess each), warm index."""
    jobs = str(Path(sys.executable).parent / "jobs")

    def timed(args: list[str], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([jobs, "--store", str(root), *args], check=True, capture_output=True)
            out.append(time.perf_counter() - t0)
        return out

    rebuild = timed(["index", "--rebuild"], 1)
    timed(["list"], 1)
    time.sleep(2.1)  # folders written in the last two seconds are looked at again by the next sync
    timed(["list"], 1)
    return [("jobs index --rebuild (lists and reads every record)", rebuild),
            ("jobs list", timed(["list"], repeats)),
            (f"jobs lineage ART ({DEPTH} deep)", timed(["lineage", deepest], repeats)),
            ("jobs show ART", timed(["show", deepest], repeats))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--fresh", action="store_true", help="delete the store built earlier and build it again")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/jobs-bench-lineage"))
    ap.add_argument("--cli", action="store_true", help="also time `jobs index --rebuild`, list, lineage, show")
    ap.add_argument("--registers", type=int, default=200,
                    help="Store.register calls in a row on the full store, timed as a rate (default 200)")
    args = ap.parse_args()
    home = args.dir / f"v3-{args.runs}"
    root, progress = home / "store", home / "progress"
    os.environ["JOBS_CACHE_DIR"] = str(home / "cache")  # never the user's cache
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} on {socket.gethostname()}, "
          f"{os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if args.fresh and home.exists():
        t0 = time.perf_counter()
        writable_tree(home)
        shutil.rmtree(home)
        print(f"removed the earlier store in {time.perf_counter() - t0:.0f} s")
    done = home / "built.json"
    if done.exists():
        built = json.loads(done.read_text())
        print(f"reusing {root}, built {built['date']} in {built['seconds']:.0f} s")
    else:
        seconds, resumed = build(root, progress, args.runs)
        built = {"seconds": seconds, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "resumed": resumed, "load": os.getloadavg()}
        done.write_text(json.dumps(built))
        print(f"built in {seconds:.0f} s")

    from lineage import Store, refs
    from lineage.records import read_record

    store = Store.open(root)
    n = refs.latest(store.refs, NAME)
    assert refs.versions(store.refs, NAME)[-1] == n, "the hint search and the listing disagree"
    size, inodes = disk_usage(root)

    # The bulk writer's records against the same kinds written by the store's own code.
    shared = json.loads((progress / "shared.json").read_text())
    bulk = run_parts(0, shared)
    work = home / "measure"
    work.mkdir(exist_ok=True)
    real_run = store.create_run({k: v for k, v in bulk["spec"].items() if k not in ("id", "created")})
    made = []

    def register_one() -> None:
        d = work / f"{real_run}-{len(made)}"
        d.mkdir()
        (d / "model.json").write_text(f"measured {len(made)} {time.time_ns()}\n")
        made.append(store.register(d, kind="model", name=NAME, run=real_run))

    register, register_best = median_ms(register_one, args.repeats)
    same_shape = all(set(read_record(a)) == set(read_record(b)) for a, b in [
        (store._path("artifact", made[0]), store._path("artifact", bulk["art"])),
        (store._path("run", real_run), store._path("run", bulk["run"])),
        (refs.version_path(store.refs / NAME, n + 1), refs.version_path(store.refs / NAME, 1))])
    store.verify(bulk["art"])
    assert store.run(bulk["run"]).state == "SUCCEEDED"
    last = n + len(made)
    assert store.resolve_artifact(f"{NAME}:latest") == made[-1] == old_resolve(store, f"{NAME}:latest")
    mid = f"{NAME}:v{n // 2}"
    assert store.resolve_artifact(mid) == old_resolve(store, mid) == run_parts(n // 2 - 1, shared)["art"]

    def fresh_art() -> str:
        return "art_" + hashlib.sha256(os.urandom(8)).hexdigest()

    add_old = median_ms(lambda: old_add(store, fresh_art()), args.repeats)
    add_new = median_ms(lambda: refs.add(store.refs, NAME, fresh_art(), None), args.repeats)  # writes the hint last
    latest_new = median_ms(lambda: store.resolve_artifact(f"{NAME}:latest"), args.repeats)
    latest_old = median_ms(lambda: old_resolve(store, f"{NAME}:latest"), args.repeats)
    mid_new = median_ms(lambda: store.resolve_artifact(mid), args.repeats)
    mid_old = median_ms(lambda: old_resolve(store, mid), args.repeats)
    listdir = median_ms(lambda: os.listdir(store.refs / NAME), args.repeats)
    hint = store.refs / NAME / refs.HINT
    kept = hint.read_bytes()
    hint.unlink()
    no_hint = median_ms(lambda: store.resolve_artifact(f"{NAME}:latest"), args.repeats)
    no_hint_probes = probes(lambda: store.resolve_artifact(f"{NAME}:latest"))
    hint.write_bytes(kept)
    latest_probes = probes(lambda: store.resolve_artifact(f"{NAME}:latest"))
    mid_probes = probes(lambda: store.resolve_artifact(mid))
    total = refs.latest(store.refs, NAME)
    assert total == last + 2 * args.repeats and refs.versions(store.refs, NAME)[-1] == total

    # Store.register's own throughput at this size: what a store built through Store would cost.
    before = len(made)
    t0 = time.perf_counter()
    for _ in range(args.registers):
        register_one()
    sustained = time.perf_counter() - t0
    assert store.resolve_artifact(f"{NAME}:latest") == made[-1] and len(made) == before + args.registers
    per_s = args.registers / sustained
    total = refs.latest(store.refs, NAME)

    print(f"\nstore: {args.runs:,} runs, each with 6 events and an artifact; {NAME} has {total:,} versions "
          f"(the bulk's records have the store's own keys: {'yes' if same_shape else 'NO'})")
    print(f"fixture build (the script's bulk writer in the store's record shapes: no Store calls, no fsync, "
          f"not the store's write path): {built['seconds']:.0f} s for {args.runs:,} runs "
          f"({args.runs / built['seconds']:,.0f} runs/s, 2 processes, built {built['date']}"
          f"{', resumed' if built.get('resumed') else ''}); it shows nothing about the goal (build <= 120 s)")
    print(f"Store.register at this size (one process, fsync on, {args.registers} calls in a row, a small folder "
          f"each, a new version of {NAME}): {sustained:.1f} s, {per_s:,.1f} registrations/s, "
          f"{1000 / per_s:.1f} ms a call; at that rate {args.runs:,} registrations alone take "
          f"{args.runs / per_s:,.0f} s (runs' records and events not counted)")
    print(f"on disk: {size / 2**30:.2f} GiB in {inodes:,} files and folders "
          f"({size / args.runs / 1024:.0f} KiB, {inodes / args.runs:.1f} inodes per run)\n")
    print(f"| operation, {total:,} versions | this store: median (best) ms | probes | "
          f"old: list the folder, median (best) ms | old / this |")
    print("|---|---|---|---|---|")
    rows = [
        (f"resolve {NAME}:latest (Store.resolve_artifact)", latest_new, latest_probes, latest_old),
        (f"resolve {mid} (Store.resolve_artifact)", mid_new, mid_probes, mid_old),
        (":latest with the hint deleted (worst case)", no_hint, no_hint_probes, latest_old),
        ("add a version (refs.add, fsync on)", add_new, None, add_old),
        ("register an artifact under the name (Store.register, whole)", (register, register_best), None, None),
        ("os.listdir of the name's folder alone", None, None, listdir),
    ]
    for what, new, nprobe, old in rows:
        cell = lambda m: f"{m[0]:.3f} ({m[1]:.3f})" if m else ""
        ratio = f"{old[0] / new[0]:,.0f}x" if new and old else ""
        print(f"| {what} | {cell(new)} | {nprobe if nprobe is not None else ''} | {cell(old)} | {ratio} |")
    if args.cli:
        print(f"\n| command, {args.runs:,} runs | median ms | best ms | goal |\n|---|---|---|---|")
        for what, xs in cli_rows(root, run_parts(DEPTH - 1, shared)["art"], max(3, args.repeats // 3)):
            goal = "< 100 ms" if what.startswith(("jobs list", "jobs lineage")) else ""
            print(f"| {what} | {statistics.median(xs) * 1000:.0f} | {min(xs) * 1000:.0f} | {goal} |")
    print(f"\ngoal: resolve <= 50 ms at {args.runs:,} versions. Medians of {args.repeats}, warm page cache; "
          "on Lustre each probe and each listed entry is a metadata round trip.")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
