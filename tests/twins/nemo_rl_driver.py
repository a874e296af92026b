"""Run in the twin: this project's Ray start-up as a two-node job (head and worker), then one of NeMo RL's
drivers against that cluster, as rank 0 of an rl job runs it (stages/backends/nemo_rl.py: RAY_ADDRESS set,
W&B offline, from NeMo RL's checkout).

    python nemo_rl_driver.py RUN_DIR CONFIG:SCRIPT...     the cluster (two_nodes.py), then each driver on it
"""
import os
import subprocess
import sys
from pathlib import Path

from stages.backends.nemo_rl import job_env
from two_nodes import cluster

checkout = Path(sys.executable).parent.parent / "nemo-rl"
with cluster(Path(sys.argv[1])) as (address, worker):
    env = {**os.environ, "RAY_ADDRESS": address, **job_env("offline")}
    for pair in sys.argv[2:]:
        config, script = pair.rsplit(":", 1)
        print(f"=== {script}", flush=True)
        code = subprocess.run([sys.executable, script, "--config", config], cwd=checkout, env=env,
                              stderr=subprocess.STDOUT).returncode   # its traceback inside its own section
        print(f"=== {script} exit {code}", flush=True)
sys.exit(0 if worker.wait(60) == 0 else 3)
