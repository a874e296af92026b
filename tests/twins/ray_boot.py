"""Run in the twin: this project's Ray start-up (runtime/ray_cluster.py) as a two-node job, head and worker.

    python ray_boot.py RUN_DIR            the head (rank 0); starts the worker itself; prints one JSON line
    python ray_boot.py RUN_DIR PORT       the worker (rank 1)
"""
import json
import subprocess
import sys
from pathlib import Path

from runtime import ray_cluster
from stages.contract import Distributed

NODES = ["twin-a", "twin-b"]
run_dir = Path(sys.argv[1])
if len(sys.argv) > 2:
    ray_cluster.serve_worker(Distributed(rank=1, world_size=2, master_addr="127.0.0.1", master_port=int(sys.argv[2]),
                                         nodes=NODES), run_dir)
    sys.exit(0)
port = ray_cluster.free_ports(1)[0]
worker = subprocess.Popen([sys.executable, __file__, str(run_dir), str(port)])
with ray_cluster.head(Distributed(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port, nodes=NODES),
                      run_dir) as address:
    import ray

    ray.init(address=address, log_to_driver=False)
    alive = sorted(n["NodeName"] for n in ray.nodes() if n["Alive"])
    tasks = sorted(ray.get([ray.remote(lambda: ray.get_runtime_context().get_node_id()).remote() for _ in range(2)]))
print(json.dumps({"ray": ray.__version__, "alive": alive, "tasks_ran": len(tasks), "worker_exit": worker.wait(60)}))
