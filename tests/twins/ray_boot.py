"""Run in the twin: this project's Ray start-up (runtime/ray_cluster.py) as a two-node job, head and worker
(two_nodes.py); prints one JSON line.

    python ray_boot.py RUN_DIR
"""
import json
import sys
from pathlib import Path

from two_nodes import cluster

with cluster(Path(sys.argv[1])) as (address, worker):
    import ray

    ray.init(address=address, log_to_driver=False)
    alive = sorted(n["NodeName"] for n in ray.nodes() if n["Alive"])
    tasks = sorted(ray.get([ray.remote(lambda: ray.get_runtime_context().get_node_id()).remote() for _ in range(2)]))
print(json.dumps({"ray": ray.__version__, "alive": alive, "tasks_ran": len(tasks), "worker_exit": worker.wait(60)}))
