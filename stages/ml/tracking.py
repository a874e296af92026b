"""Metrics to W&B (offline by default, files under the run folder) and TensorBoard event files.

    with tracking.session(ctx):      # rank 0 attaches the trackers; every ctx.log reaches them
        ...train...                  # closed on the way out, also on Requeue or an error

`tracking.wandb: offline|online|disabled` and `tracking.tensorboard: true|false` in the recipe's
common.yaml choose them. One run, one story: every attempt of a run (a requeue after preemption or
the time limit, a restart after a node failure) logs to the same W&B run (its ID derived from the
run ID, `resume="allow"`) and the same TensorBoard folder (`<run_dir>/tensorboard`), while each
attempt keeps its own log folder `<run_dir>/attempts/<n>/` (its `stage.log`, `attempt.json` and
its W&B files). Offline W&B never touches the network: attempt n writes
`<run_dir>/attempts/<n>/wandb/offline-run-…-<id>/`; `wandb sync` of them all continues one run.
The W&B run ID and folder go into the run record as the `wandb_run_id` and `wandb` tracker links.

Progress (`Progress`, used by the shared training loop): every `log_every` steps one flushed line
on stdout, which lands in the job's log (`jobs logs -f`), and `<run_dir>/progress.json`, replaced
atomically, which `jobs status` reads for step/total, loss and ETA.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
from pathlib import Path

from lineage.layout import RunDir
from stages.contract import Requeue, StageError

MODES = ("offline", "online", "disabled")
def duration(seconds: float) -> str:
    """3h04m, 12m05s, 42s: short enough for a status column."""
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """Where a training loop stands, told every `log_every` steps (rank 0 only).

    Tokens per second is measured over the last interval; the ETA extrapolates this attempt's
    average step time (a resumed attempt does not count the steps an earlier one trained).
    """

    def __init__(self, ctx, name: str, total: int, start: int = 0):
        self.ctx, self.name, self.total, self.start = ctx, name, total, start
        self.t0 = self.t_last = time.monotonic()

    def update(self, step: int, loss: float, lr: float, tokens: float, extra: dict | None = None) -> dict:
        """Print the line, replace progress.json; returns {"tokens_per_s", "eta_s"}. `tokens` is
        what the whole global batch processed since the last update (0: a stage that counts none,
        whose line then shows no speed); `extra`: the stage's own fields (rl: reward; rm: accuracy)."""
        from lineage.records import atomic_write, member_mode, strict_json

        now = time.monotonic()
        tokens_per_s = tokens / max(now - self.t_last, 1e-9)
        done = step - self.start
        eta_s = (now - self.t0) / done * (self.total - step) if done > 0 else None
        self.t_last = now
        extra = {k: v for k, v in (extra or {}).items() if v is not None}
        fields = "".join(f"  {k} {v:.4f}" for k, v in extra.items())
        speed = f"  {tokens_per_s:,.0f} tok/s" if tokens else ""
        print(f"[{self.name}] step {step}/{self.total} ({100 * step // self.total}%)  loss {loss:.4f}{fields}  "
              f"lr {lr:.2e}{speed}  ETA {'?' if eta_s is None else duration(eta_s)}",
              flush=True)
        atomic_write(RunDir(self.ctx.run_dir).progress, strict_json({
            "stage": self.name, "attempt": self.ctx.attempt, "step": step, "total": self.total,
            "loss": loss, "lr": lr, "tokens_per_s": tokens_per_s if tokens else None, "eta_s": eta_s,
            "extra": extra, "time": time.time()}, sort_keys=True).encode(), mode=member_mode)
        return {"tokens_per_s": tokens_per_s, "eta_s": eta_s}


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


def wandb_run_id(run_id: str) -> str:
    """The one W&B run ID of a run, whatever the attempt (W&B IDs take letters, digits, - and _)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", run_id)[:64]


def _wandb(ctx, mode: str, project: str) -> tuple[WandB, str]:
    """The run's W&B run, resumed by ID from the second attempt on; offline mode sets WANDB_MODE so
    nothing tries the network, and writes under this attempt's folder."""
    os.environ["WANDB_MODE"] = mode
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    t0 = time.perf_counter()
    run = wandb.init(
        mode=mode, dir=str(ctx.attempt_dir), project=project, group=ctx.run_id,
        name=f"{ctx.stage}-{ctx.run_id[:13]}", id=wandb_run_id(ctx.run_id), resume="allow",
        job_type=ctx.stage, config=ctx.config_to_keep, tags=[ctx.recipe, ctx.stage],
        # No system-metrics sampler, no console capture: both cost start-up time and threads.
        settings=wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True),
    )
    ctx.log({"tracking/wandb_init_s": round(time.perf_counter() - t0, 3)}, step=0)
    where = str(Path(run.dir).parent) if mode == "offline" else run.url
    return WandB(run), where


def check_config(config: dict) -> list[str]:
    """The `tracking:` section's problems; `jobs submit` asks every stage's config (jobs/plan.py)."""
    cfg = config.get("tracking", {}) or {}
    if not isinstance(cfg, dict):
        return [f"tracking must be a mapping (got {cfg!r})"]
    mode = cfg.get("wandb", "offline")
    return [] if mode in MODES else [f"tracking.wandb must be one of {', '.join(MODES)} (got {mode!r})"]


@contextlib.contextmanager
def session(ctx):
    """Attach the trackers the config asks for (rank 0 only) and close them however the block ends."""
    cfg = ctx.config.get("tracking", {}) or {}
    mode = cfg.get("wandb", "offline")
    problems = check_config(ctx.config)
    if problems:
        raise StageError("; ".join(problems))
    trackers = []
    log_handler = None
    if ctx.dist.is_main:
        log_handler = _attempt_log(ctx, mode)
        if cfg.get("tensorboard", True):
            tb = TensorBoard(ctx.run_dir / "tensorboard")
            ctx.add_tracker(tb, link=("tensorboard", str(ctx.run_dir / "tensorboard")))
            trackers.append(tb)
        if mode != "disabled":
            wb, where = _wandb(ctx, mode, cfg.get("project", f"jobs-{ctx.recipe}"))
            ctx.add_tracker(wb, link=("wandb", where))
            ctx.links["wandb_run_id"] = wb.run.id
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
        if log_handler is not None:
            logging.getLogger().removeHandler(log_handler)
            log_handler.close()


def _attempt_log(ctx, mode: str) -> logging.Handler:
    """This attempt's folder: attempt.json (who ran it, when, the W&B run it logs to) and stage.log
    (Python logging of this attempt, warnings included)."""
    folder = ctx.attempt_dir
    (folder / "attempt.json").write_text(json.dumps({
        "run": ctx.run_id, "attempt": ctx.attempt, "host": socket.gethostname(), "pid": os.getpid(),
        "job_id": ctx.resources.job_id,
        "start": time.time(), "wandb_run_id": None if mode == "disabled" else wandb_run_id(ctx.run_id),
        "tensorboard": str(ctx.run_dir / "tensorboard")}, sort_keys=True, indent=1) + "\n")
    handler = logging.FileHandler(folder / "stage.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    return handler
