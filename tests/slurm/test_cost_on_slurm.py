"""What a chain cost on the real dev cluster: each attempt's use as sacct kept it, and the chain's sum.

The test reads sacct itself; whether the cluster samples MaxRSS (jobacct_gather/linux) or not
(jobacct_gather/none), the recorded value must be what sacct kept, None where it kept none."""
import json
import subprocess
import time

import pytest

from helpers import run_jobs
from lineage import Store
from test_executor import env as env  # noqa: F401  (fixture: profiles and the fixture recipes)
from test_executor import job_of, submit, wait

pytestmark = pytest.mark.slurm


def kib(size: str) -> float:
    """sacct's MaxRSS (12176K, 1.5M, 2G) in KiB."""
    return float(size[:-1]) * {"K": 1, "M": 1 << 10, "G": 1 << 20}[size[-1]] if size[-1] in "KMG" else float(size) / 1024


def sacct_usage(job: str, deadline_s: float = 60) -> tuple[int, str, float | None]:
    """(Elapsed in seconds, AllocTRES, the largest MaxRSS of its steps in KiB or None where the
    accounting gathered none) of the job's allocation, read once slurmdbd has its end."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        state = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True).stdout
        if state.split() == ["COMPLETED"]:
            break
        time.sleep(0.5)
    out = subprocess.run(["sacct", "-j", job, "-P", "-n", "-o", "Elapsed,AllocTRES"], capture_output=True, text=True).stdout
    elapsed, alloc = out.splitlines()[0].split("|")   # the first line: the allocation; its steps follow
    days, _, hms = elapsed.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    rss = subprocess.run(["sacct", "-j", job, "-P", "-n", "-o", "MaxRSS"], capture_output=True, text=True).stdout.split()
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s, alloc, max(map(kib, rss)) if rss else None


def test_a_chains_cost_is_what_sacct_kept_for_each_attempt_summed(tmp_path, env):
    store = tmp_path / "store"
    count, double = submit(store, env, "testchain", "--stage", "count,double")
    assert wait(store, double, {"SUCCEEDED", "FAILED", "CANCELLED"}, env=env).state == "SUCCEEDED"
    kept = {run: sacct_usage(job_of(store, run)) for run in (count, double)}

    art = Store(store).run(double).outputs["result"]
    r = run_jobs(store, "show", art, "--cost", "--json", env=env)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [row["run"] for row in doc["runs"]] == [count, double]
    s = Store(store)
    for run, (elapsed, alloc, rss) in kept.items():
        (a,) = s.run(run).attempts
        cpus = int(dict(x.split("=") for x in alloc.split(","))["cpu"])
        used = a["usage"]   # recorded on the attempt from sacct
        assert used["elapsed_s"] == elapsed and used["cpus"] == cpus and used["cpu_hours"] == elapsed * cpus / 3600
        # The largest of its steps' MaxRSS; None (not 0) where the accounting gathered none for any step.
        assert (used["max_rss_bytes"] is None) if rss is None else used["max_rss_bytes"] == pytest.approx(rss * 1024, rel=1e-3)
    rows, total = doc["runs"], doc["total"]
    assert total["elapsed_s"] == sum(e for e, _, _ in kept.values())
    assert total["cpu_hours"] == pytest.approx(sum(row["cpu_hours"] for row in rows))
    assert total["attempts"] == 2 and total["queued"] == pytest.approx(sum(row["queued"] for row in rows))
    for p, secs in total["phases"].items():
        known = [row["phases"][p] for row in rows if row["phases"][p] is not None]
        assert secs == (pytest.approx(sum(known)) if known else None)
    shown = run_jobs(store, "show", art, "--cost", env=env).out.splitlines()[-1].split()
    assert shown[:2] == ["total", "2"]
    if all(rss is None for *_, rss in kept.values()):
        assert shown[-1] == "-"   # max RSS: not measured, never 0
