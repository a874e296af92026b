"""Ray over the job's own allocation: a head on node 0, one worker on every other node.

Each Slurm task starts its node's part with `ray start --block` in a session of its own, so that
tearing down ends exactly our processes (never `ray stop`: it kills every Ray process on the host).
The head's GCS port is derived from the job (`master_port + 1`), so workers find it without talking
to anyone; every other port is picked free on the node, because several virtual nodes (and other
jobs) may share one host. Every wait has a deadline: `JOBS_RAY_READY_TIMEOUT_S`, default 120 s.
"""
from __future__ import annotations

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
#: How long `ray start --block` gets to end its children after SIGTERM before the group is killed.
EXIT_WAIT_S = 10.0
OBJECT_STORE_BYTES = 256 * 1024 * 1024
#: Ports every node needs, picked free on its host (several virtual nodes may share one host).
NODE_PORTS = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
              "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")
#: Set in the environment of `ray start` and so of everything it spawns: how teardown finds them.
MARK_ENV = "JOBS_RAY_TEMP_DIR"
HEAD_PORTS = ("ray-client-server-port", "dashboard-port")  # Ray starts a dashboard process even without the UI


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

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.gcs_port}"

    def command(self) -> list[str]:
        """The `ray start --block` line for this node."""
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block"]
        cmd += ["--head", f"--port={self.gcs_port}", "--include-dashboard=false"] if self.head \
            else [f"--address={self.address}"]
        cmd += [f"--node-ip-address={self.ip}", f"--node-name={self.name}", f"--temp-dir={self.temp_dir}",
                f"--num-cpus={self.num_cpus}", f"--object-store-memory={OBJECT_STORE_BYTES}",
                "--disable-usage-stats", "--min-worker-port=0", "--max-worker-port=0"]  # 0: workers bind free ports
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
                   ports=dict(zip(names, ports)))


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


def write_token(path: Path) -> None:
    """A fresh secret for this cluster, readable by us alone, in the run folder every node shares."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


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
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


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

    def start(self, deadline_s: float, abandon: Callable[[], bool] = lambda: False) -> None:
        """Start this node's part; on the head, also wait until every expected node is alive.

        A worker waits for the head's port first, and starts nothing if `abandon()` turns true meanwhile.
        """
        end = time.monotonic() + deadline_s
        node = self.node
        if not node.head:
            while not _gcs_reachable(node.head_ip, node.gcs_port):
                if abandon():
                    return
                if time.monotonic() > end:
                    raise RayClusterError(f"ray: {node.name} could not reach the head at {node.address}"
                                          f" within {deadline_s:g} s")
                time.sleep(0.25)
        if node.head:
            write_token(self.token_file)
        Path(node.temp_dir).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0",
               MARK_ENV: node.temp_dir, **auth_env(self.token_file)}
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
        if node.head:
            self.wait_ready(deadline_s)

    def wait_ready(self, deadline_s: float) -> None:
        """On the head: return once every expected node is alive in Ray, else raise at the deadline."""
        end = time.monotonic() + deadline_s
        alive: set[str] = set()
        while not _gcs_reachable(self.node.head_ip, self.node.gcs_port):
            self._check_running()
            if time.monotonic() > end:
                raise RayClusterError(readiness_message(self.expected, alive, deadline_s))
            time.sleep(0.25)
        import ray

        with driver_auth(self.token_file):
            ray.init(address=self.node.address, logging_level="WARNING", log_to_driver=False,
                     configure_logging=False)
            try:
                self._poll_nodes(ray, end, deadline_s)
            finally:
                ray.shutdown()

    def _poll_nodes(self, ray, end: float, deadline_s: float) -> None:
        while True:
            alive = {n["NodeName"] for n in ray.nodes() if n["Alive"]}
            if set(self.expected) <= alive:
                return
            self._check_running()
            if time.monotonic() > end:
                raise RayClusterError(readiness_message(self.expected, alive, deadline_s))
            time.sleep(0.25)

    def _check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RayClusterError(f"ray: `ray start` on {self.node.name} exited with {self.proc.returncode}"
                                  f" (log: {self.log or 'the job stderr'})")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> list[int]:
        """End our `ray start` group, then anything left that names our temp dir; the pids that had to be killed."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        leftovers = _own_pids(self.node.temp_dir)
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + EXIT_WAIT_S
        while _own_pids(self.node.temp_dir) and time.monotonic() < end:
            time.sleep(0.1)
        shutil.rmtree(self.node.temp_dir, ignore_errors=True)
        return leftovers


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
        cluster.start(ready_timeout())
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
        while cluster.proc is not None and not marker.exists():
            if not cluster.running():
                raise RayClusterError(f"ray: the worker on {node.name} ended (exit {cluster.proc.returncode})"
                                      " before the head was done")
            time.sleep(poll_s)
    finally:
        cluster.stop()
