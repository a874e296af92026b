"""Run stages on this machine, each in its own process through submitit's LocalExecutor.

A chain runs in order and waits: a stage starts only when its upstream succeeded, and a failed
stage cancels what depends on it, with the reason in their records. While a stage trains, its
progress (the stage's progress.json) shows as a bar on a terminal, as a plain line now and then
otherwise.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from jobs.executors.base import Prepared
from lineage import Store
from lineage.layout import RunDir
from lineage.states import RunState
from runtime.entry import StageJob


class LocalExecutor:
    name = "local"

    def prepare(self, store_root, plan) -> list[Prepared]:
        return [Prepared() for _ in plan.stages]  # this machine takes any resources: nothing to settle

    def dry_run(self, store_root, plan, max_parallel: int | None = None) -> str:
        from dataclasses import replace

        from jobs.preview import format_plan

        if plan.grid is not None:   # a sweep's points share their stage: its first point shows them
            plan = replace(plan, stages=plan.stages[:1], grid=None)
        return format_plan(plan, Store(store_root))

    def launch(self, store: Store, run_ids: list[str], prepared: list[Prepared] | None = None,
               echo: Callable[[str], None] = print, max_parallel: int | None = None) -> bool:
        """A chain in order, each stage after its upstream succeeded; the points of a sweep as
        independent runs, one failing stops none of the others, `max_parallel` of them at once."""
        if len(run_ids) < 2 or not all(store.run_spec(r).sweep for r in run_ids):
            return self._chain(store, run_ids, echo)

        def one(run_id: str) -> bool:
            return self._chain(store, [run_id], echo)

        if (max_parallel or 1) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_parallel) as pool:
                return all(list(pool.map(one, run_ids)))
        return all([one(r) for r in run_ids])

    def _chain(self, store: Store, run_ids: list[str], echo: Callable[[str], None]) -> bool:
        import submitit

        ok = True
        for at, run_id in enumerate(run_ids):
            spec = store.run_spec(run_id)
            if not ok:
                failed = [r for r in run_ids if store.run(r).state in (RunState.FAILED, RunState.CANCELLED) and r != run_id]
                store.add_event(run_id, "status", state=RunState.CANCELLED, reason=f"upstream run {failed[0]} did not succeed")
                echo(f"{run_id}  {spec.stage:<9} CANCELLED (upstream failed)")
                continue
            folder = RunDir(store.run_dir(run_id)).logs
            executor = submitit.LocalExecutor(folder=folder)
            executor.update_parameters(timeout_min=int(spec.resources.get("time_min", 60)))
            echo(f"{run_id}  {spec.stage:<9} running (logs: {folder})")
            with _stderr_to(RunDir(store.run_dir(run_id)).controller_log):
                job = executor.submit(StageJob(str(store.root), run_id))
            try:
                try:
                    watch(job, store.run_dir(run_id), spec.stage, echo)
                except Exception as e:   # a display that fails must not stop the wait for the job
                    echo(f"    (progress display stopped: {type(e).__name__}: {e})")
                while not job.done():   # watch() returns when it does, unless its display failed
                    time.sleep(0.5)
            except KeyboardInterrupt:
                interrupted(store, job, run_ids[at:], echo)
                raise
            # A local job writes its outcome before it exits; without one it was killed (`jobs cancel`,
            # OOM) and submitit's result() would wait 15 s for the file (its allowance for NFS).
            if job.paths.result_pickle.exists():
                try:
                    job.result()
                except Exception:
                    ok = False
            else:
                ok = False
            view = store.run(run_id)
            if view.state != RunState.SUCCEEDED:
                ok = False
                if view.state not in (RunState.FAILED, RunState.CANCELLED):   # classified: jobs/triage.py
                    from jobs.triage import record_local_death

                    record_local_death(store, view, job)
                    view = store.run(run_id)
                echo(f"{run_id}  {spec.stage:<9} {view.state}: {view.reason}")
                echo(f"    log: {job.paths.stderr}")
            else:
                echo(f"{run_id}  {spec.stage:<9} SUCCEEDED  " + " ".join(f"{k}={v[:16]}" for k, v in view.outputs.items()))
                result = headline(spec, view.metrics)
                if result:
                    echo(f"{run_id}  {spec.stage:<9} result: {result}")
        sys.stdout.flush()
        return ok


_REDIRECT = threading.Lock()


@contextmanager
def _stderr_to(path: Path):
    """Standard error, for the processes started meanwhile, into `path`: submitit's controller
    shares the terminal's process group, so a Ctrl-C meant for `jobs` would otherwise print its
    KeyboardInterrupt traceback under the user's prompt after `jobs` has exited."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _REDIRECT:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(fd, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(fd)


def interrupted(store: Store, job, run_ids: list[str], echo: Callable[[str], None]) -> None:
    """Ctrl-C while a chain runs here: the running stage's process group is stopped and it, and
    every stage after it, is recorded CANCELLED, so no view says RUNNING (or QUEUED) for a process
    that is gone. A stage that recorded its own end keeps it."""
    from jobs.errors import JobsError
    from jobs.cancel import cancel, close_attempts
    from lineage.states import TERMINAL

    keep = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C does not cut this short
    try:
        deadline = time.monotonic() + 5.0
        while not job.done() and time.monotonic() < deadline:   # the controller had the Ctrl-C too
            time.sleep(0.1)
        for i, run_id in enumerate(run_ids):
            view = store.run(run_id)
            if view.state in TERMINAL:
                continue
            reason = "interrupted (Ctrl-C on jobs submit)" if i == 0 else "not run: jobs submit was interrupted"
            try:
                cancel(store, view, reason=reason)
            except JobsError:   # its process is already gone: record the end it could not
                store.add_event(run_id, "status", state=RunState.CANCELLED, reason=reason)
                close_attempts(store, view, reason)
            echo(f"{run_id}  {view.spec.stage:<9} CANCELLED: {reason}")
        if not job.done():   # submitit's controller ends on SIGINT (its cancel), after stopping its tasks
            job.cancel(check=False)
            deadline = time.monotonic() + 5.0
            while not job.done() and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        signal.signal(signal.SIGINT, keep)


def headline(spec: dict, metrics: dict) -> str:
    """The stage's result in words (`eval/exact_match 0.7560  eval/pass@1 0.7020`): the metrics its
    module names in HEADLINE, else its final loss; empty when it recorded none of them."""
    import importlib

    try:
        names = getattr(importlib.import_module(spec["module"]), "HEADLINE", None)
    except ImportError:
        names = None
    names = names or (f"{spec['stage']}/loss",)
    shown = [f"{n} {metrics[n]:.4f}" for n in names if isinstance(metrics.get(n), (int, float))]
    return "  ".join(shown)


#: Without a terminal, a progress line at most this often (a log file, CI, a pipe).
PLAIN_EVERY_S = 30.0


def watch(job, run_dir: Path, stage: str, echo: Callable[[str], None], poll_s: float = 0.5) -> None:
    """Wait for the job, showing what its progress.json says: a bar redrawn in place when stdout is
    a terminal; else a plain line when the step moved and PLAIN_EVERY_S has passed."""
    from stages.ml.tracking import duration

    tty = sys.stdout.isatty()
    bar, seen, said = None, None, time.monotonic()
    try:
        while not job.done():
            time.sleep(poll_s)
            try:
                p = json.loads(RunDir(run_dir).progress.read_text())
                step, total = int(p["step"]), int(p["total"])
            except (OSError, ValueError, KeyError, TypeError):
                continue   # not training yet (loading, or a stage without a loop)
            if (step, total) == seen:
                continue
            seen = (step, total)
            extra = "".join(f"  {k} {v:.4f}" for k, v in (p.get("extra") or {}).items() if isinstance(v, (int, float)))
            loss = p.get("loss")   # null in progress.json when it is not finite
            about = f"loss {loss if isinstance(loss, (int, float)) else float('nan'):.4f}{extra}" + (
                f"  ETA {duration(p['eta_s'])}" if p.get("eta_s") is not None else "")
            if tty:
                if bar is None or bar.total != total:
                    import shutil

                    from tqdm import tqdm

                    if bar is not None:
                        bar.close()
                    # A terminal that reports no size (a fresh pty) would get no bar at all from tqdm.
                    cols, rows = shutil.get_terminal_size()
                    bar = tqdm(total=total, desc=f"    {stage}", leave=False, file=sys.stdout, ncols=cols, nrows=rows,
                               bar_format="{desc} {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}]{postfix}")
                bar.n = step
                bar.set_postfix_str(about)   # redraws; tqdm puts ", " before it
            elif time.monotonic() - said >= PLAIN_EVERY_S:
                said = time.monotonic()
                echo(f"    {stage:<9} step {step}/{total}  {about}")
    finally:
        if bar is not None:
            bar.close()
