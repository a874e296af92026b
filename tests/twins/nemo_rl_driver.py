"""Run in the twin: this project's Ray start-up as a two-node job (head and worker), then one of NeMo RL's
drivers against that cluster, as rank 0 of an rl job runs it (stages/backends/nemo_rl.py: RAY_ADDRESS set,
W&B offline, from NeMo RL's checkout).

    python nemo_rl_driver.py RUN_DIR CONFIG:SCRIPT...     the head; starts the worker itself, then each driver
    python nemo_rl_driver.py RUN_DIR PORT                 the worker
"""
import os
import subprocess
import sys
from pathlib import Path

from runtime import ray_cluster
from stages.backends.nemo_rl import job_env
from stages.contract import Distributed

NODES = ["twin-a", "twin-b"]
run_dir = Path(sys.argv[1])
checkout = Path(sys.executable).parent.parent / "nemo-rl"
if sys.argv[2].isdigit():
    ray_cluster.serve_worker(Distributed(rank=1, world_size=2, master_addr="127.0.0.1", master_port=int(sys.argv[2]),
                                         nodes=NODES), run_dir)
    sys.exit(0)
port = ray_cluster.free_ports(1)[0]
worker = subprocess.Popen([sys.executable, __file__, str(run_dir), str(port)])
with ray_cluster.head(Distributed(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port, nodes=NODES),
                      run_dir) as address:
    env = {**os.environ, "RAY_ADDRESS": address, **job_env("offline")}
    for pair in sys.argv[2:]:
        config, script = pair.rsplit(":", 1)
        print(f"=== {script}", flush=True)
        code = subprocess.run([sys.executable, script, "--config", config], cwd=checkout, env=env).returncode
        print(f"=== {script} exit {code}", flush=True)
sys.exit(0 if worker.wait(60) == 0 else 3)
