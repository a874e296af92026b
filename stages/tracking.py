"""Metrics to W&B (offline by default, files under the run folder) and TensorBoard event files.

    with tracking.session(ctx):      # rank 0 attaches the trackers; every ctx.log reaches them
        ...train...                  # closed on the way out, also on Requeue or an error

`tracking.wandb: offline|online|disabled` and `tracking.tensorboard: true|false` in the recipe's
common.yaml choose them. Offline W&B never touches the network: the run is written under
`<run_dir>/wandb/offline-run-…` (`wandb sync` uploads it later) and its path goes into the run
record as the `wandb` tracker link.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from jobs.context import Requeue

MODES = ("offline", "online", "disabled")


class TensorBoard:
    def __init__(self, logdir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))
        self.closed = False

    def log(self, metrics: dict, step: int) -> None:
        if self.closed:
            return
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self, failed: bool = False) -> None:
        self.closed = True
        self.writer.close()


class WandB:
    def __init__(self, run):
        self.run = run
        self.closed = False

    def log(self, metrics: dict, step: int) -> None:
        if not self.closed:
            self.run.log(metrics, step=step)

    def close(self, failed: bool = False) -> None:
        self.closed = True
        self.run.finish(exit_code=1 if failed else 0)


def _wandb(ctx, mode: str, project: str) -> tuple[WandB, str]:
    """A W&B run for this attempt; offline mode sets WANDB_MODE so nothing tries the network."""
    os.environ["WANDB_MODE"] = mode
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    t0 = time.perf_counter()
    run = wandb.init(
        mode=mode, dir=str(ctx.run_dir), project=project, group=ctx.run_id,
        name=f"{ctx.stage}-{ctx.run_id[:13]}", id=f"{ctx.run_id}-a{ctx.attempt}",
        job_type=ctx.stage, config=ctx.config, tags=[ctx.recipe, ctx.stage],
        # No system-metrics sampler, no console capture: both cost start-up time and threads.
        settings=wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True),
    )
    ctx.log({"tracking/wandb_init_s": round(time.perf_counter() - t0, 3)}, step=0)
    where = str(Path(run.dir).parent) if mode == "offline" else run.url
    return WandB(run), where


@contextlib.contextmanager
def session(ctx):
    """Attach the trackers the config asks for (rank 0 only) and close them however the block ends."""
    cfg = ctx.config.get("tracking", {}) or {}
    mode = cfg.get("wandb", "offline")
    if mode not in MODES:
        raise ValueError(f"tracking.wandb must be one of {', '.join(MODES)} (got {mode!r})")
    trackers = []
    if ctx.dist.is_main:
        if cfg.get("tensorboard", True):
            tb = TensorBoard(ctx.run_dir / "tensorboard")
            ctx.add_tracker(tb, link=("tensorboard", str(ctx.run_dir / "tensorboard")))
            trackers.append(tb)
        if mode != "disabled":
            wb, where = _wandb(ctx, mode, cfg.get("project", f"jobs-{ctx.recipe}"))
            ctx.add_tracker(wb, link=("wandb", where))
            trackers.append(wb)
    failed = False
    try:
        yield trackers
    except Requeue:  # checkpointed: the next attempt continues, this one did not fail
        raise
    except BaseException:
        failed = True
        raise
    finally:
        for t in trackers:
            t.close(failed=failed)
