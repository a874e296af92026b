"""`jobs …` typed into a real interactive bash after the README's set-up line: ours for our
subcommands, the shell's builtin otherwise, and tab completion generated from the parser."""
from __future__ import annotations

import hashlib
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from lineage import Store

ROOT = Path(__file__).resolve().parents[2]


class Terminal:
    """bash -i on a pseudo-terminal: readline, job control and completion as a person gets them."""

    def __init__(self, env: dict, cwd: Path):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a login-free interactive bash reading no rc file
            os.chdir(cwd)
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.seen = ""

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        """Read the screen until `pattern` appears after what was already matched."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.seen)
            if m:
                self.seen = self.seen[m.end():]
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} did not appear; the terminal shows: {self.seen[-2000:]!r}")
            if select.select([self.fd], [], [], min(left, 1.0))[0]:
                try:
                    self.seen += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:  # the shell has exited
                    raise AssertionError(f"bash exited before {pattern!r}: {self.seen[-2000:]!r}") from None

    def command(self, line: str, timeout: float = 120) -> str:
        """Type a line and return what it printed, up to its exit status."""
        self.type(f"{line}; echo \"rc=$?\"\n")
        m = self.wait_for(r"(?s)(.*?)\nrc=(\d+)\r?\n", timeout)
        assert m.group(2) == "0", f"{line!r} exited {m.group(2)}: {m.group(1)[-2000:]}"
        return m.group(1)

    def close(self) -> None:
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def plain_bash(home: Path, store: Path, cwd: Path) -> Terminal:
    """An interactive bash as a new user gets one: no shell functions, venv or completion inherited
    (`jobs` is the builtin), `home` made as $HOME, `store` as $JOBS_HOME; no bell, every candidate listed."""
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASH_FUNC_", "VIRTUAL_ENV", "COMP"))}
    env.update(HOME=str(home), JOBS_HOME=str(store), TERM="dumb", PS1="$ ", PATH="/usr/local/bin:/usr/bin:/bin")
    term = Terminal(env, cwd)
    try:
        term.command("bind 'set bell-style none'; bind 'set completion-query-items 1000'")
    except BaseException:
        term.close()
        raise
    return term


def test_jobs_typed_in_bash_runs_ours_keeps_the_builtin_and_completes(tmp_path):
    # The README's set-up line is ./dev/tiny.sh = dev/setup.sh, then the pipeline: the set-up is run
    # here as it is there (with the venv in place it only installs the shell integration).
    stamp = ROOT / ".venv" / f".installed-{hashlib.sha256((ROOT / 'pyproject.toml').read_bytes()).hexdigest()[:16]}"
    assert stamp.exists(), f"{stamp.parent} does not hold this pyproject.toml's packages: run dev/setup.sh"
    setup = subprocess.run([str(ROOT / "dev" / "setup.sh")], capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0, setup.stderr

    store = tmp_path / "store"
    term = plain_bash(tmp_path / "home", store, ROOT)
    try:
        assert "builtin" in term.command("type -t jobs")      # a plain bash: `jobs` is the builtin
        term.command("source .venv/bin/activate")
        assert "function" in term.command("type -t jobs")

        # Not our subcommand: still the shell's job control.
        term.command("sleep 300 & true")
        assert re.search(r"\[1\]\+?\s+Running\s+sleep 300", term.command("jobs"))
        assert re.search(r"\[1\]\+?\s+\d+ Running\s+sleep 300", term.command("jobs -l"))
        term.command("kill %1; wait")

        # Completion: the subcommand, then the recipe (one candidate each, so readline inserts it).
        term.type("jobs su\t")
        term.wait_for(r"jobs submit ")
        term.type("ti\t")
        term.wait_for(r"tiny ")   # the screen shows what changed: "ti" and the completed "ny "
        term.type("--stage da\t")
        term.wait_for(r"data ")
        term.type("data.n_ev\t")
        term.wait_for(r"data\.n_eval=")
        term.type("\x15")  # Ctrl-U: drop the line

        out = term.command("jobs submit tiny --stage data", timeout=600)
        assert "recorded 1 run(s)" in out and "SUCCEEDED" in out

        term.type("jobs show tiny/data/sf\t")                  # aliases come from the store
        term.wait_for(r"tiny/data/sft:latest")
        term.type("\x15")
    finally:
        term.close()

    s = Store(store)
    (run,) = s.index().runs()
    assert run["stage"] == "data" and s.run(run["id"]).state == "SUCCEEDED"


def test_shell_script_routes_our_words_only():
    """The function's word list is the parser's: every subcommand and top-level option, nothing else."""
    from jobs.cli import build_parser
    from jobs.shell import commands, script

    parser = build_parser()
    words = commands(parser)
    assert {"submit", "lineage", "report", "--store", "-h"} <= set(words)
    text = script("/opt/venv/bin/jobs", parser)
    r = subprocess.run(["bash", "-c", text + "\ntype -t jobs; complete -p jobs"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("function\n") and r.stderr == "", r.stdout + r.stderr
    # Sourced into a non-interactive bash, `jobs list` reaches the entry point, `jobs -p` the builtin.
    probe = text.replace('"/opt/venv/bin/jobs" "$@"', 'echo "ours $*"')
    r = subprocess.run(["bash", "-c", probe + "\njobs list --json; jobs -p; echo builtin=$?"],
                       capture_output=True, text=True)
    assert r.stdout.split("\n")[:2] == ["ours list --json", "builtin=0"], r.stdout + r.stderr


@pytest.mark.parametrize("line, expected", [
    ("jobs ", {"submit", "status", "lineage", "recipes"}),
    ("jobs submit ", {"tiny", "nano3"}),
    ("jobs submit tiny --stage data,pre", {"data,pretrain"}),
    ("jobs submit tiny --stage sft sft.l", {"sft.lr=", "sft.log_every="}),
    ("jobs submit tiny --input mo", {"model="}),
    ("jobs artifacts --kind sft-", {"sft-data"}),
])
def test_completion_candidates(line, expected):
    env = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line)), "_ARGCOMPLETE": "1",
           "_ARGCOMPLETE_SHELL": "bash"}
    r = subprocess.run(f'"{ROOT}/.venv/bin/jobs" 8>&1 9>&2 1>/dev/null 2>&1', shell=True, env=env,
                       capture_output=True, text=True, timeout=120)
    got = {w.strip() for w in r.stdout.split("\v") if w.strip()}
    assert expected <= got, got


def test_the_integration_sources_in_a_posix_mode_bash():
    """A POSIX-mode bash refuses a function name with a '/' at its definition and aborts the whole
    sourced file: the hook's function is named as an identifier."""
    from jobs.cli import build_parser
    from jobs.shell import script

    text = script("/opt/venv/bin/jobs", build_parser())
    r = subprocess.run(["bash", "--posix", "-c", text + "\necho sourced; type -t jobs; complete -p jobs"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "" and r.stdout.split("\n")[:2] == ["sourced", "function"], r.stdout + r.stderr
    assert "-F _python_argcomplete__opt_venv_bin_jobs jobs" in r.stdout, r.stdout


def test_completion_follows_the_recipes_graph_typed_in_bash(data_store, tmp_path):
    """On a store where tiny's data stage ran: `--input` offers the selected stage's roles, a role's
    value only names of its kind, `list --stage` the stages, and a RUN the store's run IDs."""
    (run,) = [r["id"] for r in Store(data_store).index().runs()]
    term = plain_bash(tmp_path / "home", data_store, tmp_path)
    try:
        term.command(f'eval "$("{ROOT}/.venv/bin/python" -m jobs.shell)"')
        line = "jobs submit tiny --stage sft --input "
        term.wait_for(r"\$ ")   # readline reads the keys only once the prompt is up (before: the tty echoes them raw)
        term.type(line + "\t\t")                                  # several: readline lists them,
        term.wait_for(re.escape(line))                            # below the line typed, then the line again
        shown = term.wait_for(r"(?s)(.*)\$ " + re.escape(line)).group(1)
        assert set(shown.split()) >= {"data=", "model="} and "corpus=" not in shown and "prompts=" not in shown, shown
        term.type("data=\t")                                      # one name of sft-data's kind: inserted
        term.wait_for(r"data=tiny/data/sft:latest ")
        term.type("\x15jobs list --stage pretr\t")
        term.wait_for(r"pretrain ")
        term.type("\x15jobs status \t")
        term.wait_for(re.escape(run) + " ")
        term.type("\x15")
    finally:
        term.close()
