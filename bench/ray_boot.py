"""Where the seconds go from a Slurm job's start to Ray ready over its allocation, 1 and 2 nodes (dev cluster).

Ours: a `ray: true` stage (tests/fixtures raytest/probe) submitted through `jobs submit --executor slurm`;
the phases come from the entry's attempt record, runtime/ray_cluster.py's `<job>.boot.json` files and
the probe's report. The peer, in the same run: what a user's sbatch script does by hand, `ray start
--head --block` on node 0 and `ray start --address --block` on the others with Ray's default flags (plus
the per-node ports and temp dir that virtual nodes sharing one host need, the same token auth as ours,
usage stats off: no network here), each worker started once the head's port answers, readiness polled
the same way as ours (a GCS client, every 50 ms), no sleeps (the Ray docs' Slurm script adds `sleep 10`
and `sleep 5`).
Jobs run one after another, ours then the peer's, for each node count. Both batch scripts note the
time as their first command (ours: the `JOBS_BATCH_START` line the Slurm executor writes; the peer's:
the same `date` before its srun), and "first line -> all alive" is the goal's measure. sacct's Start
is whole seconds and comes before Slurm launches the script: the columns from it are +-1 s.

    .venv/bin/python bench/ray_boot.py [--repeats 1]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
JOBS = str(Path(sys.executable).parent / "jobs")
sys.path.insert(0, str(ROOT))

from lineage import Store  # noqa: E402
from runtime.ray_cluster import write_token  # noqa: E402

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
COLUMNS = ("sacct start -> first line", "first line -> entry", "-> ray start launched", "-> GCS up",
           "-> head node alive", "-> worker launched", "-> all nodes alive", "-> ray.init connected",
           "first line -> all alive", "sacct start -> all alive")


def jobs(store: Path, env: dict, *args: str) -> str:
    p = subprocess.run([JOBS, "--store", str(store), *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"jobs {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stdout


def sacct(job: str, field: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", field], capture_output=True, text=True).stdout
    return out.split()[-1] if out.split() else ""


def slurm_start(job: str) -> float:
    return datetime.datetime.fromisoformat(sacct(job, "Start")).timestamp()


def wait_final(job: str, deadline_s: float = 300) -> str:
    end = time.monotonic() + deadline_s
    while (state := sacct(job, "State").split(" ")[0]) not in FINAL:
        if time.monotonic() > end:
            raise SystemExit(f"job {job} not done after {deadline_s} s")
        time.sleep(0.5)
    return state


def phases(job_start: float, first_line: float, entry: float, head: dict, workers: list[dict],
           connected: float | None) -> dict:
    """Seconds: the arrows from the entry, the rest as named."""
    t = head["times"]
    alive = [v for k, v in t.items() if k.startswith("alive:")]
    return {"sacct start -> first line": first_line - job_start, "first line -> entry": entry - first_line,
            "-> ray start launched": t["launched"] - entry,
            "-> GCS up": t["gcs"] - entry,
            "-> head node alive": t[f"alive:{head['node']}"] - entry,
            "-> worker launched": max(w["times"]["launched"] for w in workers) - entry if workers else None,
            "-> all nodes alive": max(alive) - entry,
            "-> ray.init connected": connected - entry if connected else None,
            "first line -> all alive": max(alive) - first_line, "sacct start -> all alive": max(alive) - job_start}


def ours(store: Path, env: dict, profile: str, deadline_s: float = 300) -> dict:
    out = jobs(store, env, "submit", "raytest", "--stage", "probe", "--executor", "slurm", "--profile", profile,
               "--force")
    run = next(line.split()[0] for line in out.splitlines() if "submitted as Slurm job" in line)
    end = time.monotonic() + deadline_s
    while (view := Store(store).run(run)).state not in ("SUCCEEDED", "FAILED"):
        if time.monotonic() > end:
            raise SystemExit(f"run {run} not done after {deadline_s} s")
        jobs(store, env, "status", run)
        time.sleep(1)
    if view.state != "SUCCEEDED":
        raise SystemExit(f"run {run} failed: {view.reason}")
    job = view.jobs[-1]["job_id"]
    wait_final(job)
    report = json.loads((Path(Store(store).artifact(view.outputs["report"])["path"]) / "report.json").read_text())
    ray_dir = Store(store).run_dir(run) / "ray"
    head = json.loads((ray_dir / f"{job}.0.boot.json").read_text())
    workers = [json.loads(p.read_text()) for p in sorted(ray_dir.glob(f"{job}.0-*.boot.json"))]
    attempt = view.attempts[-1]
    return phases(slurm_start(job), attempt["batch_start"], attempt["start"], head, workers, report.get("connected"))


def peer(tmp: Path, nodes: int) -> dict:
    """A hand-written sbatch script's Ray, timed from inside (see --peer-task)."""
    out = tmp / "peer"
    out.mkdir(exist_ok=True)
    write_token(out / "token")   # the same token auth as ours (a ~/.ray/auth_token would turn it on anyway)
    task = " ".join(shlex.quote(str(a)) for a in (sys.executable, Path(__file__).resolve(), "--peer-task", out))
    job = subprocess.run(["sbatch", "--parsable", "-p", "debug", f"--nodes={nodes}", "--ntasks-per-node=1",
                          "--cpus-per-task=1", "--mem=1G", "--time=5", f"--output={out}/%j.out", f"--chdir={tmp}",
                          "--wrap", f"date +%s.%N > {shlex.quote(str(out))}/$SLURM_JOB_ID.first; srun {task}"], capture_output=True, text=True, check=True).stdout.strip()
    state = wait_final(job)
    result = out / f"{job}.json"
    if state != "COMPLETED" or not result.exists():
        raise SystemExit(f"peer job {job} {state}: {(out / f'{job}.out').read_text()[-2000:]}")
    r = json.loads(result.read_text())
    workers = [json.loads(p.read_text()) for p in sorted(out.glob(f"{job}-w*.json"))]
    return phases(slurm_start(job), float((out / f"{job}.first").read_text()), r["entry"], r, workers, r["connected"])


def peer_task(out: Path) -> None:
    """One Slurm task of the peer job: node 0 runs the head and times it, the others join."""
    entry = time.time()
    from runtime.entry import _address_of
    from runtime.ray_cluster import MARK_ENV, RayCluster, RayNode, _gcs_reachable, free_ports, primary_ip

    job, rank = os.environ["SLURM_JOB_ID"], int(os.environ["SLURM_PROCID"])
    hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True).stdout.split()
    ip = primary_ip()
    head_ip = _address_of(hosts[0])
    head_ip = ip if head_ip.startswith("127.") else head_ip
    port = 30000 + int(job) % 20000
    name = hosts[rank]
    temp_dir = f"/tmp/ray-peer{job}-{name}"
    names = ["node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "metrics-export-port", "runtime-env-agent-port"] + (["ray-client-server-port", "dashboard-port"]
                                                                  if rank == 0 else [])
    ports = [f"--{n}={p}" for n, p in zip(names, free_ports(len(names)))]
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block"]
    cmd = ray + (["--head", f"--port={port}"] if rank == 0 else [f"--address={head_ip}:{port}"])
    cmd += [f"--node-ip-address={ip}", f"--node-name={name}", f"--temp-dir={temp_dir}", "--num-cpus=1", *ports]
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(out / "token")})
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", MARK_ENV: temp_dir}
    env.pop("RAY_ADDRESS", None)
    node = RayNode(name=name, head=rank == 0, ip=ip, head_ip=head_ip, gcs_port=port, temp_dir=temp_dir, num_cpus=1)
    cluster = RayCluster(node, hosts, token_file=out / "unused")
    done = out / f"{job}.done"
    times = {"start": entry}
    try:
        if rank > 0:
            while not _gcs_reachable(head_ip, port) and not done.exists():
                time.sleep(0.05)
        cluster.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        times["launched"] = time.time()
        if rank > 0:
            (out / f"{job}-w{rank}.json").write_text(json.dumps({"node": name, "times": times}))
            while not done.exists() and cluster.proc.poll() is None:
                time.sleep(0.2)
            return
        from ray._raylet import GcsClient

        while not _gcs_reachable(head_ip, port):
            time.sleep(0.05)
        times["gcs"] = time.time()
        client = GcsClient(address=f"{head_ip}:{port}")
        while True:
            alive = RayCluster._alive(client)
            for n in alive:
                times.setdefault(f"alive:{n}", time.time())
            if set(hosts) <= alive:
                break
            time.sleep(0.05)
        import ray as ray_api

        ray_api.init(address=f"{head_ip}:{port}", log_to_driver=False)
        connected = time.time()
        ray_api.shutdown()
        (out / f"{job}.json").write_text(json.dumps({"node": name, "entry": entry, "times": times,
                                                     "connected": connected}))
    finally:
        if rank == 0:
            done.touch()
        cluster.stop()


def fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--peer-task", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_task:
        return peer_task(args.peer_task)
    subprocess.run(["bash", str(ROOT / "dev" / "slurm" / "up.sh")], check=True, capture_output=True)
    print(f"command: {' '.join(sys.argv)}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
    print(f"load average before (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"cores: {os.cpu_count()}\n")
    print("Seconds; each arrow from the entry (rank 0's Python up, before Ray); 'first line' is the batch "
          "script's first command; sacct's start has whole seconds (+-1 s).\n")
    print("| nodes | who | " + " | ".join(COLUMNS) + " | load (1 min) |")
    print("|---:|---|" + "---:|" * len(COLUMNS) + "---:|")
    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles.yaml"
        profiles.write_text("one: {partition: debug, containers: false, nodes: 1}\n"
                            "two: {partition: debug, containers: false, nodes: 2}\n")
        env = {**os.environ, "JOBS_PROFILES": str(profiles), "JOBS_RECIPES": str(FIXTURES / "recipes"),
               "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
        for nodes, profile in ((1, "one"), (2, "two")):
            for _ in range(args.repeats):
                for who, measure in (("ours (jobs submit)", lambda: ours(Path(tmp) / "store", env, profile)),
                                     ("peer: plain ray start", lambda: peer(Path(tmp), nodes))):
                    row = measure()
                    print(f"| {nodes} | {who} | " + " | ".join(fmt(row[c]) for c in COLUMNS)
                          + f" | {os.getloadavg()[0]:.1f} |", flush=True)
    print(f"\nload average after (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
