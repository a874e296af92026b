"""The training loop every tiny stage shares: AdamW, warmup + cosine decay, clipping, data parallel,
checkpoints every N steps and on Slurm's signal, and exact resume.

The data is a pure function of the step (`loss_fn(model, step, rank, world)` picks its own
examples), so the data position is the step number: a resumed run sees the same batches, even
with another number of ranks (the global batch is fixed; each rank takes its slice).

A checkpoint (`<ctx.checkpoint_dir>/<name>.pt`, replaced atomically) holds the model, optimizer,
scheduler, RNG states (python, numpy, torch), the step, the resolved config, and who wrote it: the
run ID, the config's digest and the input artifact IDs (`ctx.identity()`). Resume refuses, in one
line naming the file, a checkpoint of another run, config or inputs, one that cannot be read, and
one whose step would leave nothing to train (`read_checkpoint`): a resumed run never trains on
someone else's state or exits 0 having trained nothing. On CPU a resumed run ends with the same
bytes as an uninterrupted one (tests/stages/test_resume_and_ddp.py, test_resume_integrity.py).

Data parallel: every rank runs this loop; DDP averages gradients; the loss_fn normalises by the
global batch so that the average equals one process on the whole batch. Slurm's signal reaches
rank 0 only, so the stop decision is all-reduced each step: every rank saves and stops together
(rank 0 writes), and none is left waiting in a collective.
"""
from __future__ import annotations

import io
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lineage.layout import write_kept
from lineage.records import atomic_write
from stages.contract import StageError


@dataclass(frozen=True)
class Schedule:
    steps: int
    lr: float
    warmup: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    checkpoint_every: int = 200
    log_every: int = 25

    @classmethod
    def problems(cls, cfg: dict, where: str = "") -> list[str]:
        """Every problem with the loop's knobs in a stage section (`where`: its name, for the message);
        the stage's `check_config` calls this at submit, `from_config` again in the job."""
        name = f"{where}." if where else ""
        problems = [f"{name}{k} is missing" for k in ("steps", "lr") if k not in cfg]
        values = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        for k in ("steps", "warmup", "checkpoint_every", "log_every"):
            if k in values and (isinstance(values[k], bool) or not isinstance(values[k], int)):
                problems.append(f"{name}{k} must be an integer (got {values[k]!r})")
                values.pop(k)
        for k in ("lr", "min_lr_ratio", "weight_decay", "grad_clip"):
            if k in values and (isinstance(values[k], bool) or not isinstance(values[k], (int, float))):
                problems.append(f"{name}{k} must be a number (got {values[k]!r})")
                values.pop(k)
        for k in ("steps", "checkpoint_every", "log_every"):
            if k in values and values[k] < 1:
                problems.append(f"{name}{k} must be >= 1 (got {values[k]})")
        if "warmup" in values and values["warmup"] < 0:
            problems.append(f"{name}warmup must be >= 0 (got {values['warmup']})")
        if "min_lr_ratio" in values and not 0 <= values["min_lr_ratio"] <= 1:
            problems.append(f"{name}min_lr_ratio must be in [0, 1] (got {values['min_lr_ratio']})")
        return problems

    @staticmethod
    def warmup_for(steps: int, warmup: int) -> int:
        """The warmup a stage's section runs: `warmup` as configured when it ends before the last step
        (every full-length recipe run, unchanged), else a tenth of the steps, so that a short run of
        the same recipe (`sft.steps=20` under a warmup of 100) trains with its decay instead of being
        refused. (rl builds its Schedule itself and keeps its warmup as given: a short rl run was
        always accepted, and a recorded one must reproduce.)"""
        return warmup if warmup < steps else steps // 10

    @classmethod
    def notes(cls, cfg: dict, where: str) -> list[str]:
        """The one line submit prints when `warmup_for` changes the configured warmup."""
        return warmup_note(cfg.get("steps"), cfg.get("warmup"), f"{where}.steps", f"{where}.warmup")

    @classmethod
    def from_config(cls, cfg: dict) -> "Schedule":
        """The loop's knobs from a stage section, the warmup as `warmup_for` runs it; every problem
        reported at once."""
        problems = cls.problems(cfg)
        if problems:
            raise StageError("training schedule: " + "; ".join(problems))
        knobs = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        if "warmup" in knobs:
            knobs["warmup"] = cls.warmup_for(knobs["steps"], knobs["warmup"])
        return cls(**knobs)

    def factor(self, step: int) -> float:
        """Linear warmup to 1, then cosine down to min_lr_ratio (a multiplier of `lr`)."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_note(steps, warmup, steps_key: str, warmup_key: str) -> list[str]:
    """The line submit prints when `Schedule.warmup_for` shortens a configured warmup: the torch
    loop's (`sft.warmup`) and the megatron backend's (`sft.scheduler.lr_warmup_iters`) alike."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (steps, warmup)) or not 0 < steps <= warmup:
        return []
    return [f"{warmup_key} {warmup} is not below {steps_key} {steps}: this run warms up over "
            f"{Schedule.warmup_for(steps, warmup)} step(s), a tenth of its steps (set {warmup_key} below {steps} "
            "to choose)"]


def init_distributed(dist_info, device: str = "cpu") -> bool:
    """Join the job's process group when there is more than one rank: gloo when the stage computes
    on CPU (also on a GPU node), nccl on CUDA.

    Returns True when this call created the group (the caller then destroys it)."""
    import torch.distributed as dist

    if dist_info.world_size == 1 or dist.is_initialized():
        return False
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{dist_info.master_addr}:{dist_info.master_port}",
                            rank=dist_info.rank, world_size=dist_info.world_size)
    return True


def leave_distributed(dist_info) -> None:
    """Leave the group every rank created, with every rank present, rank 0 last.

    Rank 0 hosts the group's TCPStore. A rank still tearing its gloo group down when rank 0 exits
    can wait forever (CI saw rank 1 hang idle after train() returned, rank 0 long gone), so each
    rank counts itself out on the store once its group is destroyed and rank 0 waits for the count
    (bounded: a rank that died must not keep rank 0 from registering the outputs)."""
    import gc
    import time

    import torch.distributed as dist

    gc.collect()  # a DDP reducer left unreferenced would otherwise free the group at some later point
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    dist.destroy_process_group()
    left = store.add("jobs/left", 1)
    deadline = time.monotonic() + 120
    while dist_info.rank == 0 and left < dist_info.world_size and time.monotonic() < deadline:
        time.sleep(0.05)
        left = store.add("jobs/left", 0)


def _rng_state(device: str = "cpu") -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if device == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class ResumeRefused(StageError):
    """A checkpoint this run must not resume from; the message is one line naming the file."""


def resume_problem(state, expected: dict, steps: int) -> str | None:
    """Why `state` is not a checkpoint this run (`expected` = ctx.identity()) can resume `steps`
    steps from, or None."""
    if not isinstance(state, dict):
        return "is not a training checkpoint"
    if "run_id" not in state:
        return "names no run (written before checkpoints carried their run ID)"
    if state["run_id"] != expected["run_id"]:
        return f"belongs to run {state['run_id']}, not to this run {expected['run_id']}"
    if state.get("config_digest") != expected["config_digest"]:
        return f"was written with another config ({state.get('config_digest')}; this run's is {expected['config_digest']})"
    if state.get("inputs") != expected["inputs"]:
        theirs, ours = state.get("inputs") or {}, expected["inputs"]
        roles = sorted(r for r in set(theirs) | set(ours) if theirs.get(r) != ours.get(r))
        return f"was trained on other inputs (role {', '.join(roles)})"
    step = state.get("step")
    if type(step) is not int or step < 0:
        return f"has no valid step ({step!r})"
    if step >= steps:
        return (f"is at step {step} of {steps}: resuming would train nothing, yet this run never "
                f"registered its outputs")
    return None


def read_checkpoint(path: Path, expected: dict, steps: int) -> dict:
    """The checkpoint at `path` if this run may resume from it; else ResumeRefused (one line)."""
    import torch

    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as e:  # truncated, not a torch file, unpicklable: all the same to a resume
        raise ResumeRefused(f"checkpoint {path} cannot be read ({type(e).__name__}); "
                            f"remove it to start this run over") from None
    problem = resume_problem(state, expected, steps)
    if problem:
        raise ResumeRefused(f"checkpoint {path} {problem}; remove it to start this run over")
    return state


def train(ctx, model, schedule: Schedule, loss_fn: Callable, name: str, device: str = "cpu"):
    """Train `model` for `schedule.steps` steps; returns the trained (unwrapped) model in eval mode.

    `loss_fn(model, step, rank, world) -> (loss tensor, {metric: float})` computes this rank's
    share of step `step`'s global batch, its tensors on `device` (cpu or cuda: lm.device_of). On
    CUDA the model moves there and each forward pass runs under bf16 autocast (lm.autocast); the
    weights and optimizer stay float32. Raises `Requeue` (through ctx.requeue) after saving when
    the job is asked to stop.
    """
    import torch
    import torch.distributed as dist

    from stages.ml.lm import autocast

    created_group = init_distributed(ctx.dist, device)
    distributed = ctx.dist.world_size > 1
    if device != "cpu":
        model.to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": schedule.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=schedule.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.factor)

    # Resume: every rank reads the checkpoint rank 0 wrote (the run folder is shared).
    ckpt = ctx.checkpoint_dir / f"{name}.pt"
    start = 0
    identity = ctx.identity()
    if ckpt.exists():
        with ctx.timed("load"):
            state = read_checkpoint(ckpt, identity, schedule.steps)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            _set_rng_state(state["rng"])
        start = state["step"]
        ctx.log({f"{name}/resumed_from": start}, step=start)
    ddp = model
    if distributed:
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, **({"device_ids": [torch.cuda.current_device()]} if device == "cuda" else {}))

    def save(step: int, keep: bool = False) -> None:
        """The resume checkpoint (replaced each time); with `keep`, also a weights snapshot with the
        metrics at that step, which `jobs gc --keep-top-k` prunes by a metric."""
        with ctx.timed("save"):
            if ctx.dist.is_main:
                buf = io.BytesIO()
                torch.save({**identity, "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "rng": _rng_state(device), "config": ctx.config_to_keep,
                            "world_size": ctx.dist.world_size}, buf)
                atomic_write(ckpt, buf.getvalue())
                if keep:
                    buf = io.BytesIO()
                    torch.save(model.state_dict(), buf)
                    write_kept(ctx.checkpoint_dir, name, step, buf.getvalue(), ctx.summary, atomic_write)
            if distributed:
                dist.barrier()

    def stop_requested() -> bool:
        """True on every rank as soon as any rank was told to stop (Slurm signals rank 0 only)."""
        flag = bool(ctx.should_stop())
        if not distributed:
            return flag
        t = torch.tensor([int(flag)], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    # Progress: a line in the job's log and progress.json every log_every steps (rank 0). Tokens are
    # counted where every stage's batch passes, the model's input (padding included).
    from stages.ml.tracking import Progress

    progress = Progress(ctx, name, schedule.steps, start) if ctx.dist.is_main else None
    tokens = [0]

    def count_tokens(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor):
            tokens[0] += ids.numel()

    hook = model.register_forward_pre_hook(count_tokens, with_kwargs=True)
    model.train()
    stopped = False
    run_tokens, t_run = 0.0, time.monotonic()   # the whole loop's throughput, logged at its end
    with ctx.timed("train"):   # the steps; a save among them counts as save
        for step in range(start, schedule.steps):
            if stop_requested():
                save(step)
                stopped = True
                break
            with autocast(device):
                loss, metrics = loss_fn(ddp, step, ctx.dist.rank, ctx.dist.world_size)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
            optimizer.step()
            scheduler.step()
            if (step + 1) % schedule.log_every == 0 or step + 1 == schedule.steps:
                keys = sorted(metrics)
                values = torch.tensor([loss.item(), tokens[0], *(float(metrics[k]) for k in keys)], dtype=torch.float64,
                                      device=device)
                tokens[0] = 0
                if distributed:  # the mean over ranks of their shares is the global batch's value
                    dist.all_reduce(values)
                    values /= ctx.dist.world_size
                lr = scheduler.get_last_lr()[0]
                speed = {}
                run_tokens += values[1].item() * ctx.dist.world_size   # the mean share times the ranks: the global batch's
                if progress is not None:
                    speed = progress.update(step + 1, values[0].item(), lr, values[1].item() * ctx.dist.world_size,
                                            extra={k: v.item() for k, v in zip(keys, values[2:])})
                # lr_now: the schedule's rate at this step, not the config's peak `lr` that compare shows
                # beside it; interval_tokens_per_s: this log interval's speed, not the run's.
                ctx.log({f"{name}/loss": values[0].item(), f"{name}/lr_now": lr, f"{name}/grad_norm": grad_norm.item(),
                         **({f"{name}/interval_tokens_per_s": speed["tokens_per_s"]} if speed and speed["tokens_per_s"] else {}),
                         **{f"{name}/{k}": v.item() for k, v in zip(keys, values[2:])}}, step=step + 1)
            if (step + 1) % schedule.checkpoint_every == 0 and step + 1 < schedule.steps:
                save(step + 1, keep=True)
    hook.remove()
    if run_tokens and not stopped:   # tokens over the loop's wall time (this attempt's, when resumed)
        ctx.log({f"{name}/run_tokens_per_s": run_tokens / max(time.monotonic() - t_run, 1e-9)}, step=schedule.steps)
    del ddp  # its reducer holds the process group: free it now, while every rank is still here
    if created_group:
        leave_distributed(ctx.dist)
    if stopped:
        ctx.requeue()
    model.eval()
    return model
