"""Fault injection on the launcher side: bad profiles and resources, values that would
reach an sbatch script, tampered inputs, cancels of processes that are not the run's, bad numbers.

Every case runs the real `jobs` command and must give the expected exit (2 for bad input) with
exactly one stderr line and no traceback, leave the store byte-identical when it refuses, and write
nothing outside the store (a sandboxed HOME and working folder are hashed before and after; the
injected commands would create a marker file). Then the end-to-end promises: a tampered input is
refused and healed by re-running its producer; a job refuses a corrupt input itself; cancel signals
only its own process; a dead local run shows LOST; secrets from the environment are not recorded;
two first submits into one new store both succeed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from helpers import JOBS, count_once, run_jobs, tree_digest
from lineage import Store

FIXTURES = Path(__file__).parents[1] / "fixtures"
FAST = ["count.steps=2", "count.step_s=0"]


def base_env(tmp: Path) -> dict:
    return {"HOME": str(tmp / "home"), "JOBS_CACHE_DIR": str(tmp / "cache"),
            "JOBS_PROFILES": str(tmp / "home" / "profiles.yaml"),
            "JOBS_RECIPES": os.pathsep.join([str(tmp / "recipes"), str(FIXTURES / "recipes")]),
            "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> Path:
    """A store in which testchain's count stage succeeded once (copied, never changed, by the cases)."""
    tmp = tmp_path_factory.mktemp("counted")
    return count_once(tmp, base_env(tmp))


@dataclass
class Sandbox:
    tmp: Path
    store: Path
    env: dict
    marker: Path                       # what an injected command would create
    procs: list = field(default_factory=list)

    def profiles(self, text: str) -> None:
        (self.tmp / "home" / "profiles.yaml").write_text(text)

    def sleeper(self) -> subprocess.Popen:
        """A real process standing in for a run's job, in its own process group as a job's is."""
        p = subprocess.Popen(["sleep", "300"], start_new_session=True)
        self.procs.append(p)
        return p

    def fake_run(self, **attempt) -> str:
        """A RUNNING local run whose attempt records `attempt` (host, pid, start time...)."""
        s = Store(self.store)
        run = s.create_run({"recipe": "testchain", "stage": "count", "module": "teststages.counter",
                            "executor": "local", "config": {}, "inputs": {}, "input_kinds": {},
                            "outputs": {"result": "count-result"}, "resources": {}, "code": {}, "environment": {}})
        s.add_event(run, "attempt", attempt=1, start=time.time(), **attempt)
        s.add_event(run, "status", state="RUNNING")
        return run

    def tamper(self) -> Path:
        """Change a byte of count's output (as a user with write access could)."""
        s = Store(self.store)
        (art,) = [a for r in s.index().runs() for a in s.run(r["id"]).outputs.values()]
        f = Path(s.artifact(art)["path"]) / "result.json"
        f.chmod(0o644)
        f.write_text(f.read_text().replace('"steps": 2', '"steps": 3'))
        return f


@pytest.fixture
def sandbox(tmp_path, monkeypatch, counted) -> Sandbox:
    for d in ("home", "cwd", "recipes", "cache"):
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    store = tmp_path / "store"
    shutil.copytree(counted, store, symlinks=True)
    box = Sandbox(tmp_path, store, base_env(tmp_path), tmp_path / "owned")
    yield box
    for p in box.procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def ident(pid: int) -> dict:
    from runtime.attempts import boot_id, proc_start

    return {"host": socket.gethostname(), "pid": pid, "pgid": os.getpgid(pid), "proc_start": proc_start(pid),
            "boot_id": boot_id()}


@dataclass
class Case:
    id: str
    prepare: Callable[[Sandbox], list[str]]       # -> the command's arguments
    message: str
    fresh: bool = False                           # needs its own store (the case changes artifact files)
    code: int = 2
    after: Callable[[Sandbox], None] | None = None


def slurm(*extra: str) -> list[str]:
    return ["submit", "testchain", "--stage", "count", "--executor", "slurm", "--profile", "p", *extra]


def profile_case(id: str, body: str, message: str, args: tuple = ()) -> Case:
    def prepare(box: Sandbox) -> list[str]:
        box.profiles(body.replace("MARKER", str(box.marker)))
        return slurm(*args)
    return Case(id, prepare, message)


def fresh_store_case(id: str, damage: Callable[[Path], None], message: str) -> Case:
    def prepare(box: Sandbox) -> list[str]:
        damage(box.tamper().parent)
        return ["submit", "testchain", "--stage", "double"]
    return Case(id, prepare, message, fresh=True)


def recipe_case(id: str, resources: str, message: str) -> Case:
    def prepare(box: Sandbox) -> list[str]:
        d = box.tmp / "recipes" / "badres"
        d.mkdir()
        shutil.copy(FIXTURES / "recipes" / "testchain" / "count.yaml", d)
        (d / "recipe.yaml").write_text("name: badres\nstages:\n  count:\n    module: teststages.counter\n"
                                       f"    outputs: {{result: count-result}}\n    resources: {resources}\n")
        return ["submit", "badres", "--stage", "count"]
    return Case(id, prepare, message)


def cancel_case(id: str, attempt: Callable[[Sandbox, subprocess.Popen], dict], message: str, alive: bool = True) -> Case:
    def prepare(box: Sandbox) -> list[str]:
        p = box.sleeper()
        run = box.fake_run(**attempt(box, p))
        if not alive:
            p.kill()
            p.wait()
        box.env["SLEEPER"] = str(p.pid)
        return ["cancel", run]

    def after(box: Sandbox) -> None:
        if alive:
            p = box.procs[-1]
            assert p.poll() is None, "cancel signalled a process that was not the run's"
    return Case(id, prepare, message, after=after)


def _gone(d: Path) -> None:
    (d / "result.json").unlink()


def _extra(d: Path) -> None:
    (d / "result.json").write_text(json.dumps({"steps": 2, "digest": ""}))
    (d / "extra.txt").write_text("x")


CASES = [
    # profiles: types, ranges, YAML, names
    profile_case("profile nodes abc", "p: {nodes: abc}\n", "nodes must be an integer"),
    profile_case("profile nodes negative", "p: {nodes: -1}\n", "nodes must be an integer"),
    profile_case("profile mem absurd", "p: {mem_gb: 1.0e+30}\n", "mem_gb must be a number"),
    profile_case("profile gpus absurd", "p: {gpus_per_node: 100000}\n", "gpus_per_node must be an integer"),
    profile_case("profile time absurd", "p: {time: '99999-00:00:00'}\n", "more than a year"),
    profile_case("profile cpus zero", "p: {cpus_per_task: 0}\n", "cpus_per_task must be an integer"),
    profile_case("profile exclusive string", "p: {exclusive: 'yes'}\n", "must be true or false"),
    profile_case("profile bad yaml", "p: {partition: [debug\n", "not valid YAML"),
    profile_case("profile file a list", "- p\n", "expected a mapping of profile names"),
    profile_case("profile not a mapping", "p: 5\n", "must be a mapping of settings"),
    profile_case("profile unknown key", "p: {partitoin: debug}\n", "unknown keys"),
    profile_case("profile extends loop", "p: {extends: q}\nq: {extends: p}\n", "extends itself"),
    profile_case("profile extends unknown", "p: {extends: nosuch}\n", "extends unknown profile"),
    profile_case("unknown profile slurm", "q: {partition: debug}\n", "no profile 'p'"),
    Case("unknown profile local", lambda box: box.profiles("q: {}\n") or
         ["submit", "testchain", "--stage", "count", "--profile", "nosuch", *FAST], "no profile 'nosuch'"),
    # values that would reach an sbatch script
    profile_case("partition newline", 'p: {partition: "debug\\ntouch MARKER"}\n', "control characters"),
    profile_case("account newline", 'p: {account: "a\\rtouch MARKER"}\n', "control characters"),
    profile_case("sbatch key newline", 'p: {sbatch: {"comment\\ntouch MARKER": x}}\n', "not an sbatch option"),
    profile_case("sbatch value newline", 'p: {sbatch: {comment: "x\\ntouch MARKER"}}\n', "control characters"),
    profile_case("sbatch unknown key", "p: {sbatch: {nosuch: 1}}\n", "not an sbatch option"),
    profile_case("sbatch owned key", "p: {sbatch: {wrap: 'touch MARKER'}}\n", "set by the executor"),
    profile_case("sbatch value a list", "p: {sbatch: {comment: [1, 2]}}\n", "must be a string"),
    profile_case("srun arg newline", 'p: {srun_args: ["--x\\ntouch MARKER"]}\n', "control characters"),
    profile_case("srun args not a list", "p: {srun_args: --cpu-bind=none}\n", "must be a list"),
    profile_case("container mount comma", "p: {container_mounts: ['/a:/a,/:/host']}\n", "no comma"),
    profile_case("container mount newline", 'p: {container_mounts: ["/a:/a\\ntouch MARKER"]}\n', "control characters"),
    profile_case("profile store newline", 'p: {store: "/tmp/s\\ntouch MARKER"}\n', "control characters"),
    Case("store path newline slurm", lambda box: box.profiles("p: {partition: debug}\n") or
         ["--store", str(box.tmp / "new\nstore"), *slurm()], "control character"),
    Case("store path newline local", lambda box: ["--store", str(box.tmp / "new\nstore"), "submit", "testchain",
                                                  "--stage", "count", *FAST], "control character"),
    # recipe.yaml resources
    recipe_case("resources nodes abc", "{nodes: abc}", "nodes must be an integer"),
    recipe_case("resources mem absurd", "{mem_gb: 1.0e+30}", "mem_gb must be a number"),
    recipe_case("resources time negative", "{time_min: -5}", "time_min must be an integer"),
    recipe_case("resources unknown key", "{nodez: 1}", "unknown key"),
    # inputs that no longer match their manifest
    fresh_store_case("input tampered", lambda d: None, "changed result.json"),
    fresh_store_case("input file deleted", _gone, "missing result.json"),
    fresh_store_case("input file added", _extra, "unexpected extra.txt"),
    fresh_store_case("input folder gone", lambda d: shutil.rmtree(d), "gone"),
    # cancel acts only on the run's own process
    cancel_case("cancel other host", lambda box, p: {**ident(p.pid), "host": "elsewhere.example"}, "runs on host elsewhere"),
    cancel_case("cancel reused pid", lambda box, p: {**ident(p.pid), "proc_start": ident(p.pid)["proc_start"] - 1},
                "is now another process"),
    cancel_case("cancel earlier boot", lambda box, p: {**ident(p.pid), "boot_id": "00000000-dead"}, "earlier boot"),
    cancel_case("cancel no start time", lambda box, p: {k: v for k, v in ident(p.pid).items() if k != "proc_start"},
                "no process start time"),
    cancel_case("cancel pid gone", lambda box, p: ident(p.pid), "is gone", alive=False),
    # numbers on the command line
    Case("gc keep-top-k negative", lambda box: ["gc", "--keep-top-k", "-1", "--metric", "step"], "--keep-top-k must be 1 or more"),
    Case("gc keep-top-k zero", lambda box: ["gc", "--keep-top-k", "0", "--metric", "step", "--yes"], "--keep-top-k must be 1 or more"),
    Case("logs task negative", lambda box: ["logs", "0", "--task", "-1"], "--task must be 0 or more"),
    Case("status limit zero", lambda box: ["status", "--limit", "0"], "--limit must be at least 1"),
]


@pytest.fixture
def fresh(sandbox) -> Sandbox:
    """The sandbox with a store of its own, whose artifacts live inside it."""
    shutil.rmtree(sandbox.store)
    r = run_jobs(sandbox.store, "submit", "testchain", "--stage", "count", *FAST, env=sandbox.env)
    assert r.code == 0, r.err
    return sandbox


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault_is_one_line_and_changes_nothing(case: Case, request):
    box: Sandbox = request.getfixturevalue("fresh" if case.fresh else "sandbox")
    args = case.prepare(box)
    Store(box.store).index()          # a read command may sync the index (in the per-host cache, not the store)
    before = tree_digest(box.store)
    outside = (tree_digest(box.tmp / "home"), tree_digest(box.tmp / "cwd"))
    if args[0] == "--store":
        r = run_jobs(Path(args[1]), *args[2:], env=box.env)
    else:
        r = run_jobs(box.store, *args, env=box.env)
    assert r.code == case.code, (r.out, r.err)
    assert "Traceback" not in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("jobs: error: "), r.err
    assert case.message in r.err, r.err
    if os.environ.get("SHOW_FAULTS"):
        print(f"\n{case.id}: {r.err.strip()}")
    assert tree_digest(box.store) == before, "the store changed on an error"
    assert (tree_digest(box.tmp / "home"), tree_digest(box.tmp / "cwd")) == outside, "something was written outside"
    assert not box.marker.exists() and not list(box.tmp.glob("new*"))
    if case.after:
        case.after(box)


# ---- the promises end to end ------------------------------------------------------------------
def test_tampered_input_is_refused_then_healed_by_rerunning_its_producer(fresh):
    box = fresh
    f = box.tamper()
    before = tree_digest(box.store)
    refused = run_jobs(box.store, "submit", "testchain", "--stage", "double", env=box.env)
    assert refused.code == 2 and "changed result.json" in refused.err and str(f.parent) in refused.err, refused.err
    assert len(refused.err.strip().splitlines()) == 1 and tree_digest(box.store) == before
    # The producer is deterministic: --force re-runs it, the same artifact ID comes back with good bytes.
    healed = run_jobs(box.store, "submit", "testchain", "--stage", "count", *FAST, "--force", env=box.env)
    assert healed.code == 0, healed.err
    assert run_jobs(box.store, "verify", "testchain/count/result:latest", env=box.env).code == 0
    down = run_jobs(box.store, "submit", "testchain", "--stage", "double", env=box.env)
    assert down.code == 0, down.err
    s = Store(box.store)
    (run,) = [r["id"] for r in s.index().runs(stage="double")]
    view = s.run(run)
    assert view.state == "SUCCEEDED"
    out = json.loads((Path(s.artifact(view.outputs["result"])["path"]) / "result.json").read_text())
    assert out["steps"] == 4   # 2 * the healed count, not 2 * the tampered 3


def test_a_job_refuses_an_input_corrupted_after_submit(fresh, monkeypatch):
    """The in-job check: recorded while the input was good, corrupted before the job starts."""
    from jobs.executors.local import LocalExecutor
    from jobs.plan import make_plan
    from jobs.record import record

    box = fresh
    for k, v in box.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(FIXTURES))
    s = Store(box.store)
    plan = make_plan(s, "testchain", "double")
    (run,) = record(s, plan)
    box.tamper()
    assert not LocalExecutor().launch(s, [run], echo=lambda line: None)
    view = s.run(run)
    assert view.state == "FAILED" and "\n" not in view.reason
    assert "CorruptInput: input numbers is corrupt" in view.reason and "changed result.json" in view.reason
    assert not view.outputs


def first_running_attempt(s: Store, timeout_s: float = 120) -> tuple[str, dict]:
    """The first RUNNING run of the store and its attempt, once the attempt has recorded its process."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        for row in s.index().runs():
            view = s.run(row["id"])
            if view.state == "RUNNING":
                attempt = next((a for a in view.attempts if a.get("pid")), None)
                if attempt is not None:
                    return view.id, attempt
                break
    raise AssertionError("the run never started")


def test_cancel_stops_a_real_local_run_and_only_it(sandbox):
    box = sandbox
    submit = subprocess.Popen([JOBS, "--store", str(box.store), "submit", "testchain", "--stage", "count",
                               "count.steps=600", "count.step_s=0.5", "--force"],
                              env={**os.environ, **box.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    box.procs.append(submit)
    s = Store(box.store)
    run, attempt = first_running_attempt(s)
    assert attempt["pgid"] == attempt["pid"] != submit.pid   # the job leads its own group
    assert attempt["host"] == socket.gethostname() and attempt["proc_start"]
    r = run_jobs(box.store, "cancel", run, env=box.env)
    assert r.code == 0 and f"SIGKILL to pid {attempt['pid']} and its process group" in r.out, r.err
    out, err = submit.communicate(timeout=120)
    assert submit.returncode == 1, (submit.returncode, err)   # told its run ended, not killed itself
    assert "CANCELLED" in out
    assert s.run(run).state == "CANCELLED"
    from runtime.attempts import proc_start
    assert proc_start(attempt["pid"]) is None


def _as_from_a_terminal() -> None:
    """A shell at a terminal starts a command with SIGINT at its default. A process that ignores it
    hands that on through exec, and Python then installs no KeyboardInterrupt: the test's worker may be
    such a process (a library run in it earlier can leave SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_on_a_local_submit_leaves_no_traceback_and_every_view_says_cancelled(sandbox):
    """A Ctrl-C reaches the terminal's whole process group: `jobs` and submitit's controller."""
    box = sandbox
    submit = subprocess.Popen([JOBS, "--store", str(box.store), "submit", "testchain", "--stage", "count,double",
                               "count.steps=600", "count.step_s=0.5", "--force"],
                              env={**os.environ, **box.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, preexec_fn=_as_from_a_terminal)
    box.procs.append(submit)
    s = Store(box.store)
    run, attempt = first_running_attempt(s)
    os.killpg(submit.pid, signal.SIGINT)
    try:
        out, err = submit.communicate(timeout=120)   # until the controller, which shares stdout, is gone too
    except subprocess.TimeoutExpired:   # say what was still there, and what the record said
        left = subprocess.run(["ps", "-s", str(submit.pid), "-o", "pid,pgid,stat,etime,wchan:20,args"],
                              capture_output=True, text=True).stdout
        raise AssertionError(f"still running 120 s after the Ctrl-C:\n{left}\nrun {run}: {s.run(run)}") from None
    assert submit.returncode == 130 and err == "jobs: interrupted\n", err
    from runtime.attempts import proc_start
    assert proc_start(attempt["pid"]) is None                       # the stage's process is gone
    (double,) = [r["id"] for r in s.index().runs(stage="double")]
    assert s.run(run).state == s.run(double).state == "CANCELLED"
    assert "interrupted" in s.run(run).reason and all(a.get("end") for a in s.run(run).attempts)
    listed = run_jobs(box.store, "list", env=box.env).out
    assert f"{run}  testchain count     CANCELLED" in listed and "RUNNING" not in listed, listed
    assert "state     CANCELLED  (interrupted" in run_jobs(box.store, "show", run, env=box.env).out
    st = run_jobs(box.store, "status", run, env=box.env).out
    assert " CANCELLED " in st and "LOST" not in st, st


def test_a_local_run_whose_process_died_shows_lost_with_a_resubmit_hint(sandbox):
    box = sandbox
    p = box.sleeper()
    run = box.fake_run(**ident(p.pid))
    assert " RUNNING " in run_jobs(box.store, "status", env=box.env).out
    p.kill()
    p.wait()
    st = run_jobs(box.store, "status", env=box.env)
    line = next(line for line in st.out.splitlines() if line.startswith(run))
    assert " LOST " in line and "--force" in line and f"jobs reproduce {run}" in line, st.out
    listed = next(x for x in run_jobs(box.store, "list", env=box.env).out.splitlines() if x.startswith(run))
    assert " LOST " in listed, listed                   # every view folds the vanished process the same way
    assert "state     LOST  (process" in run_jobs(box.store, "show", run, env=box.env).out
    assert Store(box.store).run(run).state == "RUNNING"   # computed on read, nothing recorded
    assert run_jobs(box.store, "logs", run, "-f", env=box.env, timeout=60).code == 0   # -f stops on LOST


def test_status_shows_the_last_error_line_of_a_job_that_died(sandbox):
    """A process that dies without recording its end (a segfault, the OOM killer): `jobs status`
    says what its log said last, not only that it died."""
    box = sandbox
    d = box.tmp / "recipes" / "dies"
    d.mkdir()
    (d / "recipe.yaml").write_text("name: dies\nstages:\n  dies:\n    module: diesprobe\n"
                                   "    outputs: {result: probe-result}\n    resources: {time_min: 5}\n")
    (d / "dies.yaml").write_text("dies: {}\n")
    mods = box.tmp / "mods"
    mods.mkdir()
    (mods / "diesprobe.py").write_text(
        "import os, sys\n"
        "def run(ctx):\n"
        "    print('loading the shards', file=sys.stderr)\n"
        "    print('fatal: cannot map shard 3: \\x1b[31mNo space left on device', file=sys.stderr, flush=True)\n"
        "    print('cleaning up', file=sys.stderr, flush=True)\n"
        "    os._exit(3)\n")
    env = {**box.env, "PYTHONPATH": os.pathsep.join([str(mods), box.env["PYTHONPATH"]])}
    r = run_jobs(box.store, "submit", "dies", "--stage", "dies", env=env)
    assert r.code == 1, r.err
    (run,) = [x["id"] for x in Store(box.store).index().runs(recipe="dies")]
    st = run_jobs(box.store, "status", run, env=env)
    line = next(x for x in st.out.splitlines() if x.startswith(run))
    assert " FAILED " in line and "log: fatal: cannot map shard 3: \\x1b[31mNo space left on device" in line, st.out
    assert "\x1b" not in st.out


def test_secrets_from_the_environment_are_not_recorded(sandbox):
    box = sandbox
    secret = "s3cr3t-" + os.urandom(8).hex()
    d = box.tmp / "recipes" / "probe"
    d.mkdir()
    (d / "recipe.yaml").write_text("name: probe\nstages:\n  probe:\n    module: secretprobe\n"
                                   "    outputs: {result: probe-result}\n    resources: {time_min: 5}\n")
    (d / "probe.yaml").write_text("probe:\n  token: ${oc.env:MY_API_TOKEN}\n  header: Bearer ${oc.env:MY_API_TOKEN}\n")
    mods = box.tmp / "mods"
    mods.mkdir()
    (mods / "secretprobe.py").write_text(
        "import json, os\n"
        "def run(ctx):\n"
        "    out = ctx.output_dir('result')\n"
        "    cfg, want = ctx.config['probe'], os.environ['MY_API_TOKEN']\n"
        "    ok = cfg['token'] == want and cfg['header'] == 'Bearer ' + want\n"
        "    (out / 'r.json').write_text(json.dumps({'job_got_the_value': ok}))\n"
        "    return {'result': out}\n")
    env = {**box.env, "MY_API_TOKEN": secret,
           "PYTHONPATH": os.pathsep.join([str(mods), box.env["PYTHONPATH"]])}
    r = run_jobs(box.store, "submit", "probe", "--stage", "probe", env=env)
    assert r.code == 0, r.err
    s = Store(box.store)
    (run,) = [x["id"] for x in s.index().runs(recipe="probe")]
    view = s.run(run)
    assert view.spec["config"]["probe"] == {"token": "<redacted: from $MY_API_TOKEN>",
                                            "header": "Bearer <redacted: from $MY_API_TOKEN>"}
    assert json.loads((Path(s.artifact(view.outputs["result"])["path"]) / "r.json").read_text()) == {"job_got_the_value": True}
    for root in (box.store, box.tmp / "cache"):
        for dirpath, _, files in os.walk(root):
            for name in files:
                assert secret.encode() not in (Path(dirpath) / name).read_bytes(), Path(dirpath) / name
    shown = run_jobs(box.store, "show", run, env=box.env)
    assert secret not in shown.out and "redacted" in shown.out


def test_two_first_submits_into_one_new_store_both_succeed(sandbox):
    box = sandbox
    store = box.tmp / "new store"
    cmd = [JOBS, "--store", str(store), "submit", "testchain", "--stage", "count", *FAST]
    procs = [subprocess.Popen(cmd, env={**os.environ, **box.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0], results
    assert all("Traceback" not in err for _, _, err in results)
    runs = Store.open(store).index().runs()
    assert runs and all(r["state"] == "SUCCEEDED" for r in runs)
