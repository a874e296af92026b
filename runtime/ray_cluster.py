"""Ray over the job's own allocation: a head on node 0, one worker on every other node.

Each Slurm task starts its node's part with `ray start --block` in a session of its own, so that
tearing down ends exactly our processes (never `ray stop`: it kills every Ray process on the host).
The head's GCS port is derived from the job (`master_port + 1`), so workers find it without talking
to anyone; every other port is picked free on the node, because several virtual nodes (and other
jobs) may share one host. Every wait has a deadline: `JOBS_RAY_READY_TIMEOUT_S`, default 120 s.

Start-up is on every Ray stage's critical path, so nothing waits in series that need not: a worker
starts `ray start` as soon as the head has written the cluster's token (it imports Ray meanwhile, then
joins the moment the head's node is alive: see JOIN), the head asks the GCS which nodes are alive
every POLL_S (a bare GCS client, not a driver), and `ray start` leaves out what a job's cluster never
uses (the autoscaler monitor, the log monitor, the Ray Client server): each is a Python process that
would compete for the allocation's CPUs while the nodes start. Each phase's time lands in
`<job>.boot.json` next to the `ray start` logs.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from runtime.errors import RayClusterError
from stages.contract import Distributed

READY_TIMEOUT_S = 120.0
#: How often the head asks the GCS which nodes are alive, and a worker looks for the head's token.
POLL_S = 0.05
#: How long `ray start --block` gets to end its children after SIGTERM before the group is killed.
EXIT_WAIT_S = 10.0
#: The object store, sized as Ray's own default does (ray/_private/utils.py resolve_object_store_memory,
#: ray_constants): 30% of the node's memory, at most 200 GB and 95% of /dev/shm's free space (no cap
#: below 10 GB), at least 75 MiB. NeMo RL's ray.sub leaves it to that default; a GRPO batch of 2048
#: answers of 16k tokens moves through it. A profile's `ray_object_store_gb` sets it (OBJECT_STORE_ENV).
OBJECT_STORE_SHARE = 0.3
OBJECT_STORE_MAX_BYTES = 200 * 10**9
OBJECT_STORE_SHM_FLOOR_BYTES = 10**10
OBJECT_STORE_MIN_BYTES = 75 * 1024 * 1024
OBJECT_STORE_ENV = "JOBS_RAY_OBJECT_STORE_GB"
#: Ports every node needs, picked free on its host (several virtual nodes may share one host).
NODE_PORTS = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
              "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")
#: Set in the environment of `ray start` and so of everything it spawns: how teardown finds them.
MARK_ENV = "JOBS_RAY_TEMP_DIR"
HEAD_PORTS = ("dashboard-port",)  # Ray starts a dashboard process even without the UI
#: `ray start` calls this with its parameters before it starts anything (Ray's RAY_START_HOOK).
START_HOOK = "runtime.ray_cluster.lean_start"
#: A worker's `ray start`, imported while the head boots and run once the head's node is alive: `ray start
#: --address` would ask for the head's node every 2 s (and for the GCS every 1 s) until it is there.
JOIN = "from runtime.ray_cluster import join_when_head_is_up; join_when_head_is_up()"
#: Environment of the worker's `ray start`: by when (epoch seconds) the head's node must be alive.
JOIN_BY_ENV = "JOBS_RAY_JOIN_BY"


def join_when_head_is_up() -> None:
    """`python -c JOIN start --address=... ...`: `ray start` with these arguments once the head is alive."""
    from ray.scripts.scripts import cli  # the slow part (~1.5 s of CPU), overlapped with the head's start
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    address = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--address="))
    ip, port = address.rsplit(":", 1)
    end = float(os.environ.get(JOIN_BY_ENV) or time.time() + READY_TIMEOUT_S)
    client = None
    while time.time() < end:
        try:
            if client is None and _gcs_reachable(ip, int(port)):
                client = GcsClient(address=address)
            nodes = client.get_all_node_info(timeout=2).values() if client else ()
        except Exception:  # the GCS is still starting up
            nodes = ()
        if any(n.is_head_node and n.state == GcsNodeInfo.GcsNodeState.ALIVE for n in nodes):
            break
        time.sleep(POLL_S)
    else:
        sys.exit(f"ray: the head at {address} was not alive in time")
    sys.exit(cli.main(args=sys.argv[1:], prog_name="ray"))


def lean_start(params, head: bool) -> None:
    """No Ray Client server (nothing here connects with ray://): `ray start` has no flag to skip it."""
    params.ray_client_server_port = None


@dataclass(frozen=True)
class RayNode:
    """One node's part of the cluster: what `ray start` runs with there."""

    name: str
    head: bool
    ip: str
    head_ip: str
    gcs_port: int
    temp_dir: str
    num_cpus: int
    ports: dict[str, int] = field(default_factory=dict)
    object_store_bytes: int = OBJECT_STORE_MIN_BYTES

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.gcs_port}"

    def command(self) -> list[str]:
        """The `ray start --block` line for this node; on a worker, run by `join_when_head_is_up`."""
        cmd = [sys.executable, "-m", "ray.scripts.scripts"] if self.head else [sys.executable, "-c", JOIN]
        cmd += ["start", "--block"]
        cmd += ["--head", f"--port={self.gcs_port}", "--include-dashboard=false"] if self.head \
            else [f"--address={self.address}"]
        cmd += [f"--node-ip-address={self.ip}", f"--node-name={self.name}", f"--temp-dir={self.temp_dir}",
                f"--num-cpus={self.num_cpus}", f"--object-store-memory={self.object_store_bytes}",
                "--disable-usage-stats", "--min-worker-port=0", "--max-worker-port=0",  # 0: workers bind free ports
                "--no-monitor", "--include-log-monitor=false"]  # no autoscaling; stages do not log to the driver
        cmd += [f"--{name}={port}" for name, port in sorted(self.ports.items())]
        return cmd


def ready_timeout() -> float:
    value = os.environ.get("JOBS_RAY_READY_TIMEOUT_S", "")
    try:
        return float(value) if value else READY_TIMEOUT_S
    except ValueError:
        raise RayClusterError(f"JOBS_RAY_READY_TIMEOUT_S={value!r} is not a number of seconds") from None


def cpus() -> int:
    """CPUs Slurm gave this task, else this machine's."""
    for var in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return os.cpu_count() or 1


def object_store_size(environ=os.environ, memory_bytes: int | None = None, shm_bytes: int | None = None) -> int:
    """This node's object store in bytes: $JOBS_RAY_OBJECT_STORE_GB when set, else Ray's default share of
    the memory the job has here: Slurm's allocation (SLURM_MEM_PER_NODE, MB: the cgroup Ray would
    read), else the host's RAM."""
    value = environ.get(OBJECT_STORE_ENV, "")
    if value:
        try:
            gb = float(value)
        except ValueError:
            gb = float("nan")
        if not gb > 0 or gb == float("inf"):
            raise RayClusterError(f"{OBJECT_STORE_ENV}={value!r} is not a size in GB > 0")
        return max(OBJECT_STORE_MIN_BYTES, int(gb * 1024**3))
    mem = environ.get("SLURM_MEM_PER_NODE", "")
    if mem.isdigit() and int(mem) > 0:          # --mem=0 asks for all of the node's memory
        memory = int(mem) * 1024**2
    else:
        memory = memory_bytes or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if shm_bytes is None:
        try:
            st = os.statvfs("/dev/shm")
            shm_bytes = st.f_bsize * st.f_bavail
        except OSError:
            shm_bytes = 0
    cap = min(OBJECT_STORE_MAX_BYTES, max(OBJECT_STORE_SHM_FLOOR_BYTES, int(shm_bytes * 0.95)))
    return max(OBJECT_STORE_MIN_BYTES, min(int(memory * OBJECT_STORE_SHARE), cap))


def primary_ip() -> str:
    """The host's first address (`hostname -I`): Ray rewrites 127.0.0.1, so it cannot be used."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return next((a for a in out if ":" not in a), None) or socket.gethostbyname(socket.gethostname())


def job_key() -> str:
    """Names this allocation (and its requeue): the same on every task, different for every other job."""
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getpid())
    return f"{job}.{os.environ.get('SLURM_RESTART_COUNT', '0')}"


def temp_dir_for(job: str, node: str) -> str:
    """Short on purpose: Ray's Unix socket paths under it must stay within ~107 characters."""
    return f"/tmp/ray-{job}-{node}"


def free_ports(n: int) -> list[int]:
    """`n` distinct ports the kernel says are free now (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def plan_node(dist: Distributed, job: str, ip: str | None = None, ports: list[int] | None = None,
              num_cpus: int | None = None) -> RayNode:
    """This task's node. Node 0 is the head; the head's address is node 0's, its port master_port + 1."""
    head = dist.rank == 0
    name = dist.nodes[dist.rank] if dist.nodes else socket.gethostname()
    names = NODE_PORTS + (HEAD_PORTS if head else ())
    ports = ports if ports is not None else free_ports(len(names) + 1)
    # On Slurm every task derives the head's port from the job; a local run has no workers to tell.
    gcs_port = dist.master_port + 1 if dist.nodes else ports[-1]
    local_ip = ip or primary_ip()
    head_ip = local_ip if head or not dist.nodes else dist.master_addr
    if head_ip.startswith("127."):
        head_ip = local_ip  # virtual nodes on one host: Ray listens on the primary address, not loopback
    return RayNode(name=name, head=head, ip=local_ip, head_ip=head_ip, gcs_port=gcs_port,
                   temp_dir=temp_dir_for(job.split(".")[0], name), num_cpus=num_cpus or cpus(),
                   ports=dict(zip(names, ports)), object_store_bytes=object_store_size())


def readiness_message(expected: list[str], alive: set[str], deadline_s: float) -> str:
    missing = [n for n in expected if n not in alive]
    return (f"ray: {len(expected) - len(missing)} of {len(expected)} nodes joined within {deadline_s:g} s"
            f" (missing: {', '.join(missing)})")


def _own_pids(temp_dir: str) -> list[int]:
    """Our processes, wherever Ray reparented them: the command line names our temp dir, or (for
    workers, which retitle themselves `ray::…`) the environment carries our mark."""
    mark = f"{MARK_ENV}={temp_dir}\0".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if temp_dir.encode() in (entry / "cmdline").read_bytes() or mark in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return pids


def _state(pid: int) -> str | None:
    """R, S, Z (dead, not yet reaped), ...; None once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """Clock ticks since boot at which `pid` started (/proc/<pid>/stat field 22): tells a reused pid apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> dict[int, str]:
    """{pid: start time} of every live process below `root`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if (started := _start_time(pid)) is not None:
            found[pid] = started
            todo += children.get(pid, [])
    return found


def write_token(path: Path) -> None:
    """A fresh secret for this cluster, readable by us alone, in the run folder every node shares.

    Renamed into place: workers start `ray start` as soon as the file exists, so it must be whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.unlink(missing_ok=True)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    os.replace(part, path)


def auth_env(token_file: Path) -> dict[str, str]:
    """Ray's token auth, explicit: else a ~/.ray/auth_token some other Ray run left decides it for us."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}


@contextmanager
def driver_auth(token_file: Path) -> Iterator[None]:
    """Ray drivers in this process authenticate to our cluster (Ray caches the token: reset it both ways)."""
    saved = {var: os.environ.get(var) for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")}
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(auth_env(token_file))
    _reset_auth_cache()
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        _reset_auth_cache()


def _reset_auth_cache() -> None:
    """Ray >= 2.52 reads the token once per process; Ray before 2.52 (NVIDIA's images carry 2.49.2) has
    no token auth at all: its `ray start` ignores RAY_AUTH_*, its clusters admit anyone who reaches the port."""
    import ray._raylet as raylet

    loader = getattr(raylet, "AuthenticationTokenLoader", None)
    if loader is None:
        return
    raylet.Config.initialize("")
    loader.instance().reset_cache()


def _gcs_reachable(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1.0):
            return True
    except OSError:
        return False


class RayCluster:
    """This task's Ray process; `start()` then `stop()` (always, whatever happened in between)."""

    def __init__(self, node: RayNode, expected: list[str], token_file: Path, log: Path | None = None):
        self.node = node
        self.expected = expected
        self.token_file = token_file
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.times: dict[str, float] = {}
        self.join_by = time.time() + READY_TIMEOUT_S

    def start(self, deadline_s: float, abandon: Callable[[], bool] = lambda: False) -> None:
        """Start this node's part; on the head, also wait until every expected node is alive.

        A worker waits for the head's token first (the head writes it before anything else), and starts
        nothing if `abandon()` turns true meanwhile. `times` records when each phase ended (wall clock).
        """
        self.times["start"] = time.time()
        end = time.monotonic() + deadline_s
        node = self.node
        if node.head:
            write_token(self.token_file)
        else:
            while not self.token_file.exists():
                if abandon():
                    return
                if time.monotonic() > end:
                    raise RayClusterError(f"ray: {node.name} could not reach the head at {node.address}"
                                          f" within {deadline_s:g} s")
                time.sleep(POLL_S)
        self.times["token"] = time.time()
        self.join_by = self.times["start"] + deadline_s
        self._launch()
        if node.head:
            self.wait_ready(deadline_s - (time.time() - self.times["start"]), deadline_s)

    def _launch(self) -> None:
        node = self.node
        Path(node.temp_dir).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_START_HOOK": START_HOOK, MARK_ENV: node.temp_dir, **auth_env(self.token_file),
               JOIN_BY_ENV: str(self.join_by)}
        for var in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
            env.pop(var, None)
        out = None
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(node.command(), env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT if out else None, start_new_session=True)
        finally:
            if out is not None:
                out.close()
        self.times["launched"] = time.time()

    def wait_ready(self, deadline_s: float, reported_s: float | None = None) -> None:
        """On the head: return once every expected node is alive in Ray, else raise at the deadline.

        A bare GCS client asks, not a driver: `ray.init` would start a core worker only to disconnect it.
        """
        reported_s = deadline_s if reported_s is None else reported_s
        end = time.monotonic() + deadline_s
        alive: set[str] = set()
        from ray._raylet import GcsClient  # imported while `ray start` boots

        while not _gcs_reachable(self.node.head_ip, self.node.gcs_port):
            self._check_running()
            if time.monotonic() > end:
                raise RayClusterError(readiness_message(self.expected, alive, reported_s))
            time.sleep(POLL_S)
        self.times.setdefault("gcs", time.time())
        with driver_auth(self.token_file):
            client = None
            while True:
                try:
                    client = client or GcsClient(address=self.node.address)
                except Exception:  # the port answers before the GCS does
                    pass
                alive = self._alive(client) if client else set()
                for name in alive:
                    self.times.setdefault(f"alive:{name}", time.time())
                if set(self.expected) <= alive:
                    self.times["ready"] = time.time()
                    return
                self._check_running()
                if time.monotonic() > end:
                    raise RayClusterError(readiness_message(self.expected, alive, reported_s))
                time.sleep(POLL_S)

    @staticmethod
    def _alive(client) -> set[str]:
        from ray.core.generated.gcs_pb2 import GcsNodeInfo

        try:
            nodes = client.get_all_node_info(timeout=2).values()
        except Exception:  # the GCS is still starting up: ask again
            return set()
        return {n.node_name for n in nodes if n.state == GcsNodeInfo.GcsNodeState.ALIVE}

    def _check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RayClusterError(f"ray: `ray start` on {self.node.name} exited with {self.proc.returncode}"
                                  f" (log: {self.log or 'the job stderr'})")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> list[int]:
        """End our `ray start` group, then anything left that names our temp dir or descends from it; the pids
        that had to be killed. (Ray's agents retitle themselves over their environment: only the tree finds them.)"""
        tree = _descendants(self.proc.pid) if self.proc is not None else {}
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        leftovers = sorted(set(_own_pids(self.node.temp_dir))
                           | {pid for pid, started in tree.items() if _start_time(pid) == started})
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + EXIT_WAIT_S
        while (_own_pids(self.node.temp_dir) or [p for p in leftovers if _state(p) not in (None, "Z")]) \
                and time.monotonic() < end:
            time.sleep(0.1)
        shutil.rmtree(self.node.temp_dir, ignore_errors=True)
        return leftovers


def reap(job: str, node: str) -> list[int]:
    """Kill what the Ray cluster of a killed job left on this host, and its temp dir; the pids killed.

    `jobs cancel` of a local run SIGKILLs the job, which gives it no time to stop its cluster, and Ray's
    processes run in a session of their own: without this they outlive the run. `job` is the attempt's
    recorded job ID (what job_key() started from), `node` this host's name."""
    temp = temp_dir_for(job, node)
    pids = _own_pids(temp)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(temp, ignore_errors=True)
    return pids


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _detach_driver() -> None:
    """A driver the stage left connected would outlive the cluster: detach it first."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _ray_dir(run_dir: Path) -> Path:
    """Token, done marker and `ray start` logs of each attempt; the run folder is shared by all nodes."""
    return run_dir / "ray"


@contextmanager
def head(dist: Distributed, run_dir: Path) -> Iterator[str]:
    """Rank 0: the head (and, with workers, all of them) up within the deadline; yields the address.

    Ray drivers of this process authenticate to it meanwhile. On every exit the workers are told to go
    (a marker in the shared run folder) and ours ends.
    """
    node = plan_node(dist, job_key())
    cluster = RayCluster(node, dist.nodes or [node.name], token_file=_ray_dir(run_dir) / f"{job_key()}.token",
                         log=_ray_dir(run_dir) / f"{job_key()}-{node.name}.log")
    try:
        try:
            cluster.start(ready_timeout())
        finally:
            _record_boot(cluster, _ray_dir(run_dir) / f"{job_key()}.boot.json")
        with driver_auth(cluster.token_file):
            try:
                yield node.address
            finally:
                _detach_driver()
    finally:
        marker = _ray_dir(run_dir) / f"{job_key()}.done"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        cluster.stop()
        cluster.token_file.unlink(missing_ok=True)


def serve_worker(dist: Distributed, run_dir: Path, poll_s: float = 0.5) -> None:
    """Rank > 0: this node's worker, kept until the head says it is done; then ended."""
    node = plan_node(dist, job_key())
    cluster = RayCluster(node, [node.name], token_file=_ray_dir(run_dir) / f"{job_key()}.token",
                         log=_ray_dir(run_dir) / f"{job_key()}-{node.name}.log")
    marker = _ray_dir(run_dir) / f"{job_key()}.done"
    try:
        cluster.start(ready_timeout(), abandon=marker.exists)
        _record_boot(cluster, _ray_dir(run_dir) / f"{job_key()}-{node.name}.boot.json")
        while cluster.proc is not None and not marker.exists():
            if not cluster.running():
                raise RayClusterError(f"ray: the worker on {node.name} ended (exit {cluster.proc.returncode})"
                                      " before the head was done")
            time.sleep(poll_s)
    finally:
        cluster.stop()


def _record_boot(cluster: RayCluster, path: Path) -> None:
    """Where this node's start-up time went (wall-clock seconds): the file, and on the head one line of stderr."""
    t = cluster.times
    if not t:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"node": cluster.node.name, "head": cluster.node.head, "times": t}, sort_keys=True))
    if cluster.node.head and "ready" in t:
        alive = sorted((v, k.split(":", 1)[1]) for k, v in t.items() if k.startswith("alive:"))
        nodes = ", ".join(f"{name} {v - t['start']:.1f} s" for v, name in alive)
        print(f"ray: {len(cluster.expected)} node(s) alive {t['ready'] - t['start']:.1f} s after the start"
              f" (GCS {t['gcs'] - t['start']:.1f} s; {nodes})", file=sys.stderr, flush=True)
