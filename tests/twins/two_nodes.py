"""This project's Ray start-up (runtime/ray_cluster.py) as a two-node job in the twin: rank 0's head
in the caller's process, rank 1's worker in a second process of the same interpreter.

    python two_nodes.py RUN_DIR PORT      the worker (rank 1), as `cluster` starts it
"""
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from runtime import ray_cluster
from stages.contract import Distributed

NODES = ["twin-a", "twin-b"]


def rank(r: int, port: int) -> Distributed:
    return Distributed(rank=r, world_size=2, master_addr="127.0.0.1", master_port=port, nodes=NODES)


@contextmanager
def cluster(run_dir: Path):
    """Yields (the head's address, the worker's process) while the cluster is up."""
    port = ray_cluster.free_ports(1)[0]
    worker = subprocess.Popen([sys.executable, __file__, str(run_dir), str(port)])
    with ray_cluster.head(rank(0, port), run_dir) as address:
        yield address, worker


if __name__ == "__main__":
    ray_cluster.serve_worker(rank(1, int(sys.argv[2])), Path(sys.argv[1]))
