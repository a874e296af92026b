"""nano3's GRPO, DPO and RM in the nemo-rl image's CPU twin, as far as a CPU allows: our Ray start-up brings
up a two-node Ray 2.49.2 cluster, and NeMo RL's own drivers (run_grpo_math.py, run_dpo.py, run_rm.py) load our rendered
configs with its own loader, load the tokenizer and the data, start the loggers (GRPO: and the math
environment), and stop where NeMo RL asks Ray for GPUs (the vLLM generation workers', the policy's): the
GPU boundary, before any CUDA call. A toy model, prompts and preference pairs stand for the SFT model
and prep_rl's and prep_sft's outputs."""
from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from jobs import recipes
from twin import NEMO_RL, TOY, require, run

require()
pytestmark = pytest.mark.slow

BOUNDARY = "nemo_rl/distributed/virtual_cluster.py"


ALGORITHMS = {"grpo": [], "dpo": ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"]}


def test_nano3_grpo_dpo_and_rm_run_nemo_rls_drivers_in_the_twin_up_to_the_gpu_request(tmp_path):
    from stages.backends import nemo_rl

    r = run(["-c", TOY, str(tmp_path / "model")])
    assert r.returncode == 0, r.stderr[-2000:]
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prefs").mkdir()
    for split in ("train", "validation"):
        (tmp_path / "prompts" / f"{split}.jsonl").write_text(
            "".join(f'{{"prompt": "{a}+{a}=?", "answer": "{2 * a}"}}\n' for a in range(1, 9)))
        (tmp_path / "prefs" / f"{split}.jsonl").write_text("".join(json.dumps(
            {"context": [{"role": "user", "content": f"{a}+{a}=?"}],
             "completions": [{"rank": 0, "completion": [{"role": "assistant", "content": str(2 * a)}]},
                             {"rank": 1, "completion": [{"role": "assistant", "content": str(2 * a + 1)}]}]}) + "\n"
            for a in range(1, 9)))
    rec = recipes.load("nano3")
    res = dict(rec.stage("rl").resources)
    runs = []
    for name, overrides in ALGORITHMS.items():
        drv, cfg = nemo_rl.translate(recipes.compose(rec, "rl", overrides)["rl"], policy=tmp_path / "model",
                                     prompts=tmp_path / "prompts", prefs=tmp_path / "prefs", reward_model=tmp_path / "rm",
                                     nodes=res["nodes"], gpus_per_node=res["gpus_per_node"], run_dir=tmp_path / name,
                                     wandb="offline")
        cfg["defaults"] = cfg["defaults"].replace(str(nemo_rl.REPO), str(NEMO_RL))   # the image's /opt/nemo-rl
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        runs.append(f"{tmp_path / f'{name}.yaml'}:{drv.script}")
    rm_res = dict(rec.stage("rm").resources)
    drv, cfg = nemo_rl.translate_rm(recipes.compose(rec, "rm", [])["rm"], model=tmp_path / "model", prefs=tmp_path / "prefs",
                                    nodes=rm_res["nodes"], gpus_per_node=rm_res["gpus_per_node"], run_dir=tmp_path / "rm",
                                    wandb="offline")
    cfg["defaults"] = cfg["defaults"].replace(str(nemo_rl.REPO), str(NEMO_RL))
    (tmp_path / "rm.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    runs.append(f"{tmp_path / 'rm.yaml'}:{drv.script}")
    r = run(["tests/twins/nemo_rl_driver.py", str(tmp_path / "ray"), *runs],
            timeout=900, env={"SLURM_JOB_ID": f"9{os.getpid()}", "JOBS_RAY_READY_TIMEOUT_S": "120",
                              "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"})   # NeMo RL's own knob: ask once, not 6 times
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "ray: 2 node(s) alive" in r.stderr
    for name, script, gpus in (("grpo", "examples/run_grpo_math.py", res["nodes"] * res["gpus_per_node"]),
                               ("dpo", "examples/run_dpo.py", res["nodes"] * res["gpus_per_node"]),
                               ("rm", "examples/run_rm.py", rm_res["nodes"] * rm_res["gpus_per_node"])):
        out = r.stdout.split(f"=== {script}\n")[1].split(f"=== {script} exit ")
        assert out[1].startswith("1\n"), out[0][-3000:]
        # In order: NeMo RL's loader on our file, the data, the loggers, then the refusal.
        marks = [f"Loaded configuration from: {tmp_path / f'{name}.yaml'}", "Setting up data",
                 "Initialized TensorboardLogger",
                 f"Not enough GPUs available. Requested {gpus} GPUs, but only 0 are available in the cluster."]
        at = [out[0].find(m) for m in marks]
        assert -1 not in at and at == sorted(at), (name, dict(zip(marks, at)), out[0][-4000:])
    # Every traceback ends at the boundary, in NeMo RL's placement groups: nothing failed before it.
    tracebacks = re.findall(r"Traceback \(most recent call last\):\n(.*?)\n(\S[^\n]*)", r.stdout + r.stderr, re.S)
    assert len(tracebacks) >= 3
    for frames, error in tracebacks:
        assert re.findall(r'File "([^"]+)", line', frames)[-1].endswith(BOUNDARY), frames
        assert error.startswith("nemo_rl.distributed.virtual_cluster.ResourceInsufficientError"), error
