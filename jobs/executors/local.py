"""Run stages on this machine, each in its own process through submitit's LocalExecutor.

A chain runs in order and waits: a stage starts only when its upstream succeeded, and a failed
stage cancels what depends on it, with the reason in their records.
"""
from __future__ import annotations

import sys
from typing import Callable

from jobs.executors import Prepared
from lineage import Store
from runtime.entry import StageJob


class LocalExecutor:
    name = "local"

    def prepare(self, store_root, plan) -> list[Prepared]:
        return [Prepared() for _ in plan.stages]  # this machine takes any resources: nothing to settle

    def dry_run(self, store_root, plan) -> str:
        from jobs.show import format_plan

        return format_plan(plan)

    def launch(self, store: Store, run_ids: list[str], prepared: list[Prepared] | None = None,
               echo: Callable[[str], None] = print) -> bool:
        import submitit

        ok = True
        for run_id in run_ids:
            spec = store.run_spec(run_id)
            if not ok:
                failed = [r for r in run_ids if store.run(r).state in ("FAILED", "CANCELLED") and r != run_id]
                store.add_event(run_id, "status", state="CANCELLED", reason=f"upstream run {failed[0]} did not succeed")
                echo(f"{run_id}  {spec['stage']:<9} CANCELLED (upstream failed)")
                continue
            folder = store.run_dir(run_id) / "logs"
            executor = submitit.LocalExecutor(folder=folder)
            executor.update_parameters(timeout_min=int(spec["resources"].get("time_min", 60)))
            echo(f"{run_id}  {spec['stage']:<9} running (logs: {folder})")
            job = executor.submit(StageJob(str(store.root), run_id))
            try:
                job.result()
            except Exception:
                ok = False
            view = store.run(run_id)
            if view.state != "SUCCEEDED":
                ok = False
                if view.state not in ("FAILED", "CANCELLED"):
                    store.add_event(run_id, "status", state="FAILED", reason="the job process died before recording an end")
                    view = store.run(run_id)
                echo(f"{run_id}  {spec['stage']:<9} {view.state}: {view.reason}")
                echo(f"    log: {job.paths.stderr}")
            else:
                echo(f"{run_id}  {spec['stage']:<9} SUCCEEDED  " + " ".join(f"{k}={v[:16]}" for k, v in view.outputs.items()))
        sys.stdout.flush()
        return ok
