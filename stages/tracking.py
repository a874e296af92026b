"""Metrics to W&B (offline by default, files under the run folder) and to TensorBoard event files."""
from __future__ import annotations

import os
from pathlib import Path


class TensorBoard:
    def __init__(self, logdir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))

    def log(self, metrics: dict, step: int) -> None:
        for k, v in metrics.items():
            if isinstance(v, (int, float)):
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run):
        self.run = run

    def log(self, metrics: dict, step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def start(ctx) -> list:
    """Attach the trackers the config asks for (rank 0 only); returns them for `stop`."""
    if not ctx.dist.is_main:
        return []
    cfg = ctx.config.get("tracking", {})
    trackers = []
    if cfg.get("tensorboard", True):
        tb = TensorBoard(ctx.run_dir / "tensorboard")
        ctx.add_tracker(tb, link=("tensorboard", str(ctx.run_dir / "tensorboard")))
        trackers.append(tb)
    mode = cfg.get("wandb", "offline")
    if mode in ("offline", "online"):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        run = wandb.init(
            mode=mode, dir=str(ctx.run_dir), project=cfg.get("project", f"jobs-{ctx.recipe}"),
            name=f"{ctx.stage}-{ctx.run_id[:13]}", id=f"{ctx.run_id}-a{ctx.attempt}", group=ctx.run_id,
            config=ctx.config, settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        where = run.dir if mode == "offline" else run.url
        wb = WandB(run)
        ctx.add_tracker(wb, link=("wandb", str(Path(where).parent) if mode == "offline" else where))
        trackers.append(wb)
    return trackers


def stop(trackers: list) -> None:
    for t in trackers:
        t.close()
