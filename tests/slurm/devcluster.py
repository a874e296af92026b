"""The dev Slurm cluster's own commands, with deadlines: what the Slurm tests and their fixtures share."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

UP = Path(__file__).parents[2] / "dev" / "slurm" / "up.sh"
# sacct states after which a job (its latest attempt) will not run again.
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED"}


def sh(*cmd: str, timeout: float = 60) -> str:
    """Run a Slurm client command; its stdout, or an AssertionError with its stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}"
    return p.stdout


@dataclass
class SlurmCluster:
    """Helpers over the real cluster's own commands; every wait has a deadline."""

    partition: str = "debug"

    def sbatch(self, *args: str) -> str:
        """Submit; the job ID. Pass --output (and --chdir) so nothing lands in the checkout."""
        return sh("sbatch", "--parsable", *args).strip().split(";")[0]

    def sacct(self, job: str, fields: str = "State,ExitCode") -> list[str]:
        """The job's latest allocation record (no steps), as its fields; [] while sacct has none."""
        lines = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", fields).strip().splitlines()
        return lines[-1].split("|") if lines else []

    def final_state(self, job: str, deadline_s: float = 60) -> tuple[str, str]:
        """Wait until sacct reports a final state; (state, exit code), e.g. ("COMPLETED", "0:0").

        "CANCELLED by 0" is returned as "CANCELLED".
        """
        end = time.monotonic() + deadline_s
        record: list[str] = []
        while time.monotonic() < end:
            record = self.sacct(job)
            if record and record[0].split()[0] in FINAL_STATES:
                return record[0].split()[0], record[1]
            time.sleep(0.3)
        raise AssertionError(f"job {job} not final after {deadline_s} s: sacct says {record}")

    def wait_until(self, what: str, check, deadline_s: float = 60, every_s: float = 0.3):
        """Poll `check()` until it returns something truthy; that value. AssertionError at the deadline."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            value = check()
            if value:
                return value
            time.sleep(every_s)
        raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")

    def job_field(self, job: str, name: str) -> str:
        """One field of `scontrol show job` (jobs stay there MinJobAge=300 s after they end)."""
        for word in sh("scontrol", "show", "job", "-o", job).split():
            key, _, value = word.partition("=")
            if key == name:
                return value
        raise KeyError(name)

    def holds_memory(self) -> bool:
        """Whether jobs of the `memcap` partition are held to their --mem: up.sh chose task/cgroup, since
        this host has cgroup v1's memory controller (dev/slurm/up.sh memory_cgroup)."""
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
        return any(line.split("=", 1)[-1].strip() == "task/cgroup" for line in config.splitlines()
                   if line.startswith("TaskPlugin "))

    def node_states(self) -> dict[str, str]:
        """{node: short state} for the partition's nodes, e.g. {"node1": "idle", "node2": "mix"}."""
        out = sh("sinfo", "-h", "-N", "-p", self.partition, "-o", "%N %t")
        return dict(line.split() for line in out.splitlines())
