"""What every executor is: the `Executor` protocol jobs/submit.py drives, and `Prepared`, what one settled."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from containers import Image
    from jobs.plan import Plan
    from lineage import Store


@dataclass(frozen=True)
class Prepared:
    """What an executor settled for one stage before anything is recorded."""

    params: dict = field(default_factory=dict)   # sbatch parameters (slurm)
    image: "Image | None" = None                 # the pinned container image, when the stage runs in one
    record: dict = field(default_factory=dict)   # facts for the run record (image reference, profile)
    python: str | None = None                    # slurm: the job's interpreter (in a container: its start-up)


class Executor(Protocol):
    name: str

    def prepare(self, store_root: Path, plan: "Plan") -> list[Prepared]:
        """Validate every stage against the target (sbatch --test-only...); raise JobsError to refuse."""

    def dry_run(self, store_root: Path, plan: "Plan", max_parallel: int | None = None) -> str:
        """What would run, without recording or launching anything (a sweep's plan: how its points would)."""

    def launch(self, store: "Store", run_ids: list[str], prepared: list[Prepared],
               echo: Callable[[str], None] = print, max_parallel: int | None = None) -> bool:
        """Run (local: and wait) or submit (slurm: and return) the recorded runs: a chain in order, a
        sweep's points independently, at most `max_parallel` at once; False when a local run failed."""
