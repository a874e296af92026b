"""Exact resume after an interruption, and data parallel training that matches one process."""
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs import recipes
from jobs.context import Distributed, Requeue, StageContext
from lineage import Store

pytestmark = pytest.mark.slow
OVERRIDES = ["pretrain.steps=30", "pretrain.checkpoint_every=10", "pretrain.log_every=5", "pretrain.warmup=5",
             "tracking.wandb=disabled", "tracking.tensorboard=false"]


@pytest.fixture(scope="module")
def inputs(data_store) -> dict:
    store = Store(data_store)
    return {role: str(store.artifact(store.resolve_artifact(f"tiny/data/{role}:latest"))["path"])
            for role in ("corpus", "tokenizer")}


def config() -> dict:
    return recipes.compose(recipes.load("tiny"), "pretrain", OVERRIDES)


def make_ctx(run_dir: Path, inputs: dict, attempt: int = 1, stop_at: int | None = None, dist=None) -> StageContext:
    calls = {"n": 0}

    def should_stop() -> bool:  # asked once per step, before it runs
        calls["n"] += 1
        return stop_at is not None and calls["n"] == stop_at + 1

    run_dir.mkdir(parents=True, exist_ok=True)
    return StageContext(run_id="test-run", recipe="tiny", stage="pretrain", config=config(),
                        inputs={k: Path(v) for k, v in inputs.items()}, run_dir=run_dir, attempt=attempt,
                        should_stop=should_stop, dist=dist or Distributed())


def test_interrupted_run_resumes_to_bit_identical_weights(tmp_path, inputs):
    from stages import pretrain

    whole = pretrain.run(make_ctx(tmp_path / "whole", inputs))["model"]
    with pytest.raises(Requeue):
        pretrain.run(make_ctx(tmp_path / "cut", inputs, stop_at=17))
    import torch
    assert torch.load(tmp_path / "cut" / "checkpoints" / "pretrain.pt", weights_only=False)["step"] == 17
    resumed = pretrain.run(make_ctx(tmp_path / "cut", inputs, attempt=2))["model"]
    assert (whole / "model.safetensors").read_bytes() == (resumed / "model.safetensors").read_bytes()
    logged = [json.loads(line)["step"] for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
              if "pretrain/loss" in line]
    assert logged == [5, 10, 15, 20, 25, 30]


RANK = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from test_resume_and_ddp import make_ctx
    from jobs.context import Distributed
    from stages import pretrain
    rank, port, run_dir, inputs = int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), json.loads(sys.argv[5])
    pretrain.run(make_ctx(run_dir / f"rank{rank}", inputs,
                          dist=Distributed(rank=rank, world_size=2, master_addr="127.0.0.1", master_port=port)))
""")


def losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["pretrain/loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "pretrain/loss" in line]


def test_two_ranks_follow_the_one_process_loss_curve(tmp_path, inputs):
    from stages import pretrain

    pretrain.run(make_ctx(tmp_path / "one", inputs))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(Path(__file__).parent), str(r), str(port),
                               str(tmp_path / "two"), json.dumps(inputs)]) for r in (0, 1)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two" / "rank0")
    assert len(one) == len(two) == 6
    # Same global batch, split in two: only float summation order differs.
    assert max(abs(a - b) for a, b in zip(one, two)) < 1e-3, (one, two)
    assert not (tmp_path / "two" / "rank1" / "outputs").exists()   # only rank 0 writes outputs
