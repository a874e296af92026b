"""nano3's rl stage (GRPO, NeMo RL) run as a job runs it, in the nemo-rl image's CPU twin: a recorded run,
the job's entry (runtime.entry.execute, started the way a container job starts: runtime.bootstrap with
the runtime bundle) in the twin's Python, our Ray start-up, the backend's run_stage, NeMo RL's own
run_grpo_math.py from the twin's checkout under that Python. The machine has no GPU, so the run stops at
NeMo RL's request for GPUs, and its record says so: failure class gpu_boundary at the refusing file and
line of NeMo RL's source, every phase before it done, and no retry."""
from __future__ import annotations

import json
import re

import pytest

from twin import NEMO_RL, NEMO_RL_TWIN, TOY, require, run

require()
pytestmark = pytest.mark.slow

BOUNDARY = "nemo_rl/distributed/virtual_cluster.py"


def refusal_line() -> int:
    """The line of the twin's virtual_cluster.py whose raise ends NeMo RL's placement-group retries (one
    retry here: NRL_VIRTUAL_CLUSTER_MAX_RETRIES=1), read from the source."""
    lines = (NEMO_RL / BOUNDARY).read_text().splitlines()
    (at,) = [i + 1 for i, line in enumerate(lines[:-1])
             if line.strip() == "raise ResourceInsufficientError(" and "Maximum number of retries" in lines[i + 1]]
    return at


def test_nano3_grpo_through_the_job_entry_stops_at_the_gpu_boundary_and_the_record_says_where(tmp_path):
    from helpers import run_jobs
    from lineage import Store

    r = run(["-c", TOY, str(tmp_path / "model")])
    assert r.returncode == 0, r.stderr[-2000:]
    (tmp_path / "prompts").mkdir()
    for split in ("train", "validation"):
        (tmp_path / "prompts" / f"{split}.jsonl").write_text(
            "".join(f'{{"prompt": "{a}+{a}=?", "answer": "{2 * a}"}}\n' for a in range(1, 9)))
    root = tmp_path / "store"
    for src, kind in (("model", "model"), ("prompts", "rl-prompts")):   # as a user brings their own
        added = run_jobs(root, "add", str(tmp_path / src), "--kind", kind, "--name", f"toy/{src}")
        assert added.code == 0, added.err
    store = Store(root)
    run_id, r = NEMO_RL_TWIN.execute(root, "nano3", "rl", ["policy=toy/model:latest", "prompts=toy/prompts:latest"],
                                     env={"JOBS_RAY_READY_TIMEOUT_S": "120",
                                          "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"})   # NeMo RL's own knob: ask once, not 6 times
    assert r.returncode != 0
    view = store.run(run_id)
    (attempt,) = view.attempts
    assert view.state == "FAILED" and attempt["failure_class"] == "gpu_boundary", (attempt, r.stderr[-3000:])
    assert attempt["boundary"]["file"] == BOUNDARY and attempt["boundary"]["line"] == refusal_line(), attempt
    assert attempt["boundary"]["message"].startswith("Not enough GPUs available. Requested 8 GPUs, but only 0")
    assert attempt["python_executable"].startswith(str(NEMO_RL.parent))   # the job ran in the twin's Python
    # Nothing failed before it: inputs verified, Ray up, NeMo RL's loader on our config, the data, the loggers.
    assert {"verify", "ray_start", "stage", "ray_stop"} <= set(attempt["phases"])
    marks = [f"Loaded configuration from: {store.run_dir(run_id) / 'nemo_rl.yaml'}", "Setting up data",
             "Initialized TensorboardLogger", "Not enough GPUs available", "Traceback (most recent call last)"]
    at = [r.stderr.find(m) for m in marks]
    assert -1 not in at and at == sorted(at), (dict(zip(marks, at)), r.stderr[-4000:])
    tracebacks = re.findall(r'Traceback \(most recent call last\):\n(.*?)\n(\S[^\n]*)', r.stderr, re.S)
    assert re.findall(r'File "([^"]+)", line', tracebacks[0][0])[-1].endswith(BOUNDARY), tracebacks[0]

    shown = run_jobs(root, "show", run_id)
    assert shown.code == 0, shown.err
    assert (f"stopped at GPU boundary: {BOUNDARY}:{refusal_line()} (Not enough GPUs available." in shown.out
            and "class gpu_boundary" in shown.out), shown.out
    assert json.loads(run_jobs(root, "list", "--failed", "gpu_boundary", "--json").out)[0]["id"] == run_id
