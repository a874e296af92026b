"""Live progress: a real pretrain stage running in the background shows step/total, loss and ETA in
`jobs status`, progress lines in its log, and a bar on the terminal of the `jobs submit` that waits
for it; `jobs logs` shows the current attempt only."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from helpers import JOBS, run_jobs
from jobs import progress, status
from jobs.logs import follow_logs
from jobs.errors import JobsError
from lineage import Store

STEPS = 400   # far more than the test waits for: it cancels the run once progress shows
PRETRAIN = [f"pretrain.steps={STEPS}", "pretrain.log_every=2", "pretrain.warmup=2",
            "tracking.wandb=disabled", "tracking.tensorboard=false"]
ROW = re.compile(r"^(\S+)\s+pretrain\s+RUNNING\s+local\s+(\d+)/(\d+) loss (\d+\.\d{4}) ETA (\S+)")


def _read_pty(fd: int, sink: bytearray) -> None:
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:   # the other side closed
            return
        if not chunk:
            return
        sink.extend(chunk)


def test_a_running_local_stage_shows_progress_in_status_logs_and_a_terminal_bar(data_store, tmp_path):
    store = tmp_path / "store"
    import shutil

    shutil.copytree(data_store, store, symlinks=True)
    master, slave = pty.openpty()   # `jobs submit` on a terminal, as a user runs it
    submit = subprocess.Popen([JOBS, "--store", str(store), "submit", "tiny", "--stage", "pretrain", *PRETRAIN],
                              stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen = bytearray()
    try:
        deadline = time.monotonic() + 300
        match = None
        while match is None and time.monotonic() < deadline:
            _read_pty(master, screen)
            st = run_jobs(store, "status")
            assert st.code == 0, st.err
            match = next((m for line in st.out.splitlines() if (m := ROW.match(line))), None)
            if match is None:
                assert submit.poll() is None, screen.decode(errors="replace")
                time.sleep(1)
        assert match, f"no progress in `jobs status` after 300 s:\n{st.out}"
        run, step, total, loss, eta = match.groups()
        assert int(total) == STEPS and 2 <= int(step) < STEPS and int(step) % 2 == 0
        assert re.fullmatch(r"(\d+h\d\dm|\d+m\d\ds|\d+s)", eta)
        # The loss shown is the one the stage logged at that step.
        rows = [json.loads(x) for x in (Store(store).run_dir(run) / "metrics.jsonl").read_text().splitlines()]
        logged = {r["step"]: r["pretrain/loss"] for r in rows if "pretrain/loss" in r}
        assert f"{logged[int(step)]:.4f}" == loss
        assert all(r["pretrain/interval_tokens_per_s"] > 0 for r in rows if "pretrain/loss" in r)
        # The job's log carries the same progress lines (stdout, flushed as they happen).
        logs = run_jobs(store, "logs", run)
        assert logs.code == 0, logs.err
        assert re.search(rf"\[pretrain\] step 2/{STEPS} \(0%\)  loss \d+\.\d{{4}}  lr \S+  [\d,]+ tok/s  ETA \S+", logs.out), logs.out
        assert "==> run " in logs.out and "attempt 1" in logs.out
        # The waiting `jobs submit` draws a bar on its terminal (it polls progress.json twice a second).
        bar = re.compile(rf"    pretrain +\d+%\|.*\| \d+/{STEPS} \[\S+\], loss \d+\.\d{{4}}  ETA \S+")
        deadline = time.monotonic() + 60
        while not bar.search(screen.decode(errors="replace")) and time.monotonic() < deadline:
            time.sleep(0.5)
            _read_pty(master, screen)
        assert bar.search(screen.decode(errors="replace")), screen.decode(errors="replace")
        assert run_jobs(store, "cancel", run).code == 0
        submit.wait(timeout=120)
        _read_pty(master, screen)
        assert "CANCELLED" in screen.decode(errors="replace")
        shown = run_jobs(store, "show", run)   # the killed attempt has ended, in the record too
        assert re.search(r"attempt   #1 .* \d+\.\d s  exit cancelled  \(cancelled by user\)", shown.out), shown.out
        assert "running  exit" not in shown.out
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
        os.close(master)


# ---- reading progress, following logs: the pure parts -------------------------------------------
def test_eta_counts_down_from_when_progress_was_written_and_only_for_its_attempt(tmp_path):
    (tmp_path / "progress.json").write_text(json.dumps(
        {"attempt": 2, "step": 40, "total": 100, "loss": 1.5, "eta_s": 300.0, "time": 1000.0}))
    assert progress.read_progress(tmp_path, 2, now=1100.0) == {"step": 40, "total": 100, "loss": 1.5, "eta_s": 200.0}
    assert progress.read_progress(tmp_path, 2, now=9999.0)["eta_s"] == 0.0
    assert progress.read_progress(tmp_path, 3, now=1100.0)["eta_s"] is None   # a requeued attempt, not reporting yet
    # A stage without progress.json: the last loss in metrics.jsonl (a torn last line is skipped).
    (tmp_path / "progress.json").unlink()
    (tmp_path / "metrics.jsonl").write_text('{"step": 3, "rl/loss": 0.5}\n{"step": 4, "rl/loss": 0.25}\n{"step": 5, "rl/lo')
    assert progress.read_progress(tmp_path, 1, now=0.0) == {"step": 4, "loss": 0.25}
    line = status.format_rows([status.Row("r", "rl", "RUNNING", step=4, loss=0.25)])[1]
    assert "4/? loss 0.2500" in line and "ETA" not in line


def test_pending_reason_and_start_in_words():
    assert status.pending_why(status.Live("PENDING", "BeginTime", start="2026-11-24T03:00:00")) == \
        "BeginTime (its --begin time has not come); expected start 2026-11-24T03:00:00"
    assert status.pending_why(status.Live("PENDING", "SomethingNew")) == \
        "SomethingNew; no start time estimated yet"


def _run_with_attempts(root: Path, attempts: list[tuple[int, str]]) -> tuple[Store, str]:
    store = Store.open(root, create=True)
    run = store.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": "slurm", "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
    for n, job in attempts:
        store.add_event(run, "attempt", attempt=n, job_id=job, start=time.time())
        store.add_event(run, "attempt", attempt=n, end=time.time(), exit="requeued")
    store.add_event(run, "status", state="FAILED", reason="test")   # ended: no Slurm query
    return store, run


def test_logs_show_the_current_attempt_only(tmp_path):
    mark = "submitit INFO (2026-11-24 01:00:00,000) - Starting with JobEnvironment(job_id={j})\n"
    # Two attempts in two jobs: only the second job's files.
    store, run = _run_with_attempts(tmp_path / "a", [(1, "111"), (2, "222")])
    logs = store.run_dir(run) / "logs"
    logs.mkdir(parents=True)
    (logs / "111_0_log.out").write_text(mark.format(j=111) + "first attempt\n")
    (logs / "222_0_log.out").write_text(mark.format(j=222) + "second attempt\n")
    (logs / "222_0_log.err").write_text("second stderr\n")
    out: list[str] = []
    follow_logs(store, run, write=out.append)
    text = "".join(out)
    assert "second attempt" in text and "second stderr" in text and "first attempt" not in text
    assert "attempt 2, job 222" in text
    # A requeued Slurm job appending to one file (JobFileAppend=1): from the last start on.
    store, run = _run_with_attempts(tmp_path / "b", [(1, "333"), (2, "333")])
    logs = store.run_dir(run) / "logs"
    logs.mkdir(parents=True)
    (logs / "333_0_log.out").write_text(mark.format(j=333) + "first attempt\n" + mark.format(j=333) + "second attempt\n")
    out = []
    follow_logs(store, run, follow=True, write=out.append)   # returns: the run has ended
    text = "".join(out)
    assert "second attempt" in text and "first attempt" not in text and text.count("Starting with") == 1
    # Nothing yet: one line, not a traceback.
    store, run = _run_with_attempts(tmp_path / "c", [])
    with pytest.raises(JobsError, match="has no logs yet"):
        follow_logs(store, run, write=out.append)
