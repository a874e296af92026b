"""Ray over the allocation: the per-node layout and command lines, and a real one-node cluster on this host."""
from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest

from helpers import ray_pids, run_jobs
from stages.contract import Distributed
from runtime.ray_cluster import (JOIN, RayCluster, RayClusterError, cpus, driver_auth, free_ports, plan_node,
                              _descendants, readiness_message, ready_timeout, serve_worker)
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
TWO = dict(world_size=2, master_addr="127.0.0.1", master_port=24000, nodes=["node1", "node2"])


def test_head_and_worker_layout_on_two_virtual_nodes_of_one_host():
    head = plan_node(Distributed(rank=0, **TWO), "77.0", ip="10.0.0.5", ports=[1, 2, 3, 4, 5, 6, 7, 8], num_cpus=3)
    worker = plan_node(Distributed(rank=1, **TWO), "77.0", ip="10.0.0.5", ports=[11, 12, 13, 14, 15, 16, 17],
                       num_cpus=3)
    assert head.head and not worker.head
    assert (head.name, head.temp_dir) == ("node1", "/tmp/ray-77-node1")
    assert (worker.name, worker.temp_dir) == ("node2", "/tmp/ray-77-node2")
    # Workers find the head from the job alone: node 0's address (loopback -> this host's), master_port + 1.
    assert head.address == worker.address == "10.0.0.5:24001"
    assert set(head.ports) - set(worker.ports) == {"dashboard-port"}
    assert not set(head.ports.values()) & set(worker.ports.values())


def test_worker_on_another_host_uses_node_0s_address():
    dist = Distributed(rank=1, world_size=2, master_addr="10.1.0.1", master_port=30000, nodes=["a", "b"])
    node = plan_node(dist, "5.0", ip="10.1.0.2", ports=list(range(7)), num_cpus=1)
    assert node.address == "10.1.0.1:30001" and node.ip == "10.1.0.2"


def test_command_lines():
    head = plan_node(Distributed(rank=0, **TWO), "77.0", ip="10.0.0.5", ports=list(range(40, 48)), num_cpus=3)
    worker = plan_node(Distributed(rank=1, **TWO), "77.0", ip="10.0.0.5", ports=list(range(50, 57)), num_cpus=2)
    h, w = head.command(), worker.command()
    assert h[1:5] == ["-m", "ray.scripts.scripts", "start", "--block"]
    assert w[1:5] == ["-c", JOIN, "start", "--block"]   # imports Ray at once, joins when the head is alive
    for cmd in (h, w):
        assert {"--disable-usage-stats", "--min-worker-port=0", "--max-worker-port=0",
                "--node-ip-address=10.0.0.5", "--no-monitor", "--include-log-monitor=false"} <= set(cmd)
    assert {"--head", "--port=24001", "--include-dashboard=false", "--num-cpus=3", "--node-name=node1",
            "--temp-dir=/tmp/ray-77-node1", "--node-manager-port=40"} <= set(h)
    assert {"--address=10.0.0.5:24001", "--num-cpus=2", "--node-name=node2", "--temp-dir=/tmp/ray-77-node2"} <= set(w)
    assert not [a for a in w if a.startswith(("--head", "--port=", "--include-dashboard", "--ray-client"))]


def test_temp_dir_leaves_room_for_rays_socket_paths():
    node = plan_node(Distributed(rank=1, world_size=2, master_port=2, nodes=["n1", "gpu-node-0123"]),
                     "12345678.3", ip="10.0.0.1", ports=list(range(7)), num_cpus=1)
    socket_path = f"{node.temp_dir}/session_2026-11-23_15-56-23_601978_123456/sockets/plasma_store"
    assert len(socket_path) <= 107


def test_local_run_gets_a_free_head_port_not_a_fixed_one():
    node = plan_node(Distributed(), "9.0", ip="10.0.0.5", num_cpus=1)
    assert node.head and node.name == socket.gethostname()
    assert node.gcs_port != Distributed().master_port + 1
    assert len(set(node.ports.values()) | {node.gcs_port}) == 8


def test_free_ports_are_distinct():
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(p > 0 for p in ports)


def test_readiness_message_names_the_missing_nodes():
    assert readiness_message(["node1", "node2", "node3"], {"node1"}, 5) == \
        "ray: 1 of 3 nodes joined within 5 s (missing: node2, node3)"


def test_cpus_and_timeout_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert cpus() == 3
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    assert cpus() == os.cpu_count()
    monkeypatch.setenv("JOBS_RAY_READY_TIMEOUT_S", "2.5")
    assert ready_timeout() == 2.5
    monkeypatch.setenv("JOBS_RAY_READY_TIMEOUT_S", "soon")
    with pytest.raises(RayClusterError, match="JOBS_RAY_READY_TIMEOUT_S='soon' is not a number"):
        ready_timeout()


def test_worker_that_cannot_reach_the_head_fails_within_its_deadline():
    (closed,) = free_ports(1)
    dist = Distributed(rank=1, world_size=2, master_addr="127.0.0.1", master_port=closed - 1, nodes=["a", "b"])
    cluster = RayCluster(plan_node(dist, "t1.0"), ["b"], token_file=Path("/nonexistent/token"))
    with pytest.raises(RayClusterError, match=rf"ray: b could not reach the head at .*:{closed} within 1 s"):
        cluster.start(1.0)
    assert cluster.proc is None


def test_worker_whose_head_is_already_done_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "424242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "424242.1.done").touch()
    (closed,) = free_ports(1)
    serve_worker(Distributed(rank=1, world_size=2, master_port=closed - 1, nodes=["a", "b"]), tmp_path)
    assert not ray_pids("/tmp/ray-424242-")


@pytest.mark.slow
def test_one_node_cluster_comes_up_with_the_allocations_cpus_and_leaves_nothing(tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "2048")
    node = plan_node(Distributed(), f"t{os.getpid()}.0")
    cluster = RayCluster(node, [node.name, "ghost"], token_file=tmp_path / "token", log=tmp_path / "ray.log")
    try:
        with pytest.raises(RayClusterError) as err:   # the whole deadline is waited (ghost never joins): keep it short
            cluster.start(6)
        assert re.fullmatch(rf"ray: [01] of 2 nodes joined within 6 s \(missing: ({node.name}, )?ghost\)",
                            str(err.value)), err.value
        cluster.expected = [node.name]
        cluster.wait_ready(60)   # the head is up: now only this node is expected
        assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600

        @ray.remote(num_cpus=1)
        class Holder:
            def pid(self) -> int:
                return os.getpid()

        with driver_auth(cluster.token_file):
            ray.init(address=node.address, log_to_driver=False)
            alive = [n for n in ray.nodes() if n["Alive"]]
            assert [(n["NodeName"], n["Resources"]["CPU"]) for n in alive] == [(node.name, 1.0)]
            # Ray's default share of the allocation's 2 GB, not a fixed size
            assert alive[0]["Resources"]["object_store_memory"] == node.object_store_bytes == int(2048 * 1024**2 * 0.3)
            holder = Holder.options(lifetime="detached", name="holder", namespace="t").remote()
            actor_pid = ray.get(holder.pid.remote())
            ray.shutdown()
        assert actor_pid in ray_pids(node.temp_dir)   # a raylet-spawned worker names our temp dir too
        started = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                           for pid in ray_pids(node.temp_dir) if Path(f"/proc/{pid}").exists())
        assert "gcs_server" in started and "raylet" in started
        # What a job's cluster never uses is not started: autoscaler monitor, log monitor, Ray Client server.
        assert not [p for p in ("monitor.py", "log_monitor", "ray.util.client.server") if p in started]
        assert {"start", "gcs", f"alive:{node.name}", "ready"} <= set(cluster.times)
        agents = _descendants(cluster.proc.pid)   # Ray's agents retitle themselves: only the tree names them
        assert any("Agent" in Path(f"/proc/{pid}/cmdline").read_text() for pid in agents)
    finally:
        cluster.stop()
    assert not ray_pids(node.temp_dir)
    assert not [pid for pid in agents if running(pid)]
    assert not running(actor_pid)
    assert not Path(node.temp_dir).exists()


def running(pid: int) -> bool:
    """Not gone and not a zombie (nothing may reap orphans in a container)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def local_env() -> dict:
    return {"JOBS_RECIPES": str(FIXTURES / "recipes"),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
@pytest.mark.parametrize("fail", [False, True])
def test_local_ray_stage_gets_a_cluster_and_ends_it(tmp_path, fail):
    store = tmp_path / "store"
    r = run_jobs(store, "submit", "raytest", "--stage", "probe", f"probe.fail={str(fail).lower()}", env=local_env())
    s = Store(store)
    (run,) = [row["id"] for row in s.index().runs()]
    view = s.run(run)
    job = view.attempts[0]["job_id"]
    assert not ray_pids(f"/tmp/ray-{job}-")
    # Where the attempt's time went, recorded however it ended; a failed stage never got to register.
    phases = view.attempts[0]["phases"]
    ran = ["verify", "ray_start", "stage", "ray_stop"] + ([] if fail else ["gate", "register"])
    assert sorted(phases) == sorted(ran) and all(x >= 0 for x in phases.values()), phases
    shown = run_jobs(store, "show", run, env=local_env())
    assert re.search("^phases    " + "  ".join(rf"{k} \d+\.\d s" for k in ran) + "$", shown.out, re.M), shown.out
    if fail:
        assert r.code != 0 and view.state == "FAILED"
        assert "ray_probe failed on purpose" in view.reason
        return
    assert r.code == 0, r.err
    report = json.loads((Path(s.artifact(view.outputs["report"])["path"]) / "report.json").read_text())
    assert report["address"] == report["env_address"]
    assert [n["name"] for n in report["nodes"]] == [socket.gethostname()]
    assert {t["node"] for t in report["tasks"]} == {socket.gethostname()} and len(report["tasks"]) == 2
    assert report["actors"] == [socket.gethostname()]


@pytest.mark.slow
def test_cancel_of_a_local_ray_stage_ends_its_ray_cluster_too(tmp_path):
    """The job is SIGKILLed (no time to stop its cluster) and Ray runs in a session of its own:
    cancel ends Ray's processes itself, found by the attempt's temp dir."""
    import subprocess
    import sys
    import time

    store = tmp_path / "store"
    jobs = str(Path(sys.executable).parent / "jobs")
    p = subprocess.Popen([jobs, "--store", str(store), "submit", "raytest", "--stage", "probe", "probe.hold_s=120"],
                         env={**os.environ, **local_env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(store.glob("runs/*/ray/*.token")) or not ray_pids("/tmp/ray-"):
            assert time.monotonic() < deadline and p.poll() is None, "the Ray stage never started"
            time.sleep(0.5)
        s = Store(store)
        (run,) = [row["id"] for row in s.index().runs()]
        while not s.run(run).attempts or not ray_pids(f"/tmp/ray-{s.run(run).attempts[0]['job_id']}-"):
            assert time.monotonic() < deadline, "no Ray process of this run"
            time.sleep(0.5)
        job = s.run(run).attempts[0]["job_id"]
        r = run_jobs(store, "cancel", run)
        assert r.code == 0 and "processes of its Ray cluster" in r.out, r.out + r.err
        assert not ray_pids(f"/tmp/ray-{job}-") and not list(Path("/tmp").glob(f"ray-{job}-*"))
        assert s.run(run).state == "CANCELLED"
    finally:
        p.kill()
        p.communicate()


def test_the_object_store_is_rays_default_share_of_the_jobs_memory_unless_the_profile_sets_it():
    """The same size Ray's own default gives for that much memory (Ray reads /dev/shm the same way);
    Slurm's allocation is the memory, else the host's; JOBS_RAY_OBJECT_STORE_GB (a profile's
    ray_object_store_gb) wins; a bad value is one line."""
    from ray._private.utils import resolve_object_store_memory

    from runtime.ray_cluster import object_store_size

    for gib in (4, 900, 4000):     # below every cap, past 95% of this host's /dev/shm, past Ray's 200 GB
        assert object_store_size({}, memory_bytes=gib * 1024**3) == resolve_object_store_memory(gib * 1024**3)
    assert object_store_size({"SLURM_MEM_PER_NODE": "8192"}) == resolve_object_store_memory(8192 * 1024**2)
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert object_store_size({"SLURM_MEM_PER_NODE": "0"}) == resolve_object_store_memory(host)
    assert object_store_size({"JOBS_RAY_OBJECT_STORE_GB": "64", "SLURM_MEM_PER_NODE": "8192"}) == 64 * 1024**3
    with pytest.raises(RayClusterError, match=r"^JOBS_RAY_OBJECT_STORE_GB='lots' is not a size in GB > 0$"):
        object_store_size({"JOBS_RAY_OBJECT_STORE_GB": "lots"})
    node = plan_node(Distributed(), "9.0", ip="10.0.0.5", num_cpus=1)
    assert f"--object-store-memory={node.object_store_bytes}" in node.command()
