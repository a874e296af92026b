"""The project speaks of itself: its code, docs, recipes and tests say what the software does and
what was measured, never how or by whom the work was organised: FORBIDDEN below lists the phrases.

The phrases are narrow on purpose: "session" alone is an ordinary word here (a pytest session
fixture, a process session, tracking.session), as are "helper", "agent" (Ray's, NeMo Gym's) and
"deadline" (every wait has one).
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("jobs", "lineage", "stages", "runtime", "containers", "recipes", "bench", "dev", "docs", "tests", ".ci")
#: Commit messages are read from this commit on (the history before it was written before the check).
COMMITS_SINCE = "004ce1b07fad500cc1d07c4f684fc87bf4d89046"
#: The OpenLineage spec's own schema files, as published (their words are the spec's, not ours).
THIRD_PARTY = ROOT / "tests" / "fixtures" / "openlineage"
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".json", ".lock", ""}

FORBIDDEN = re.compile("|".join([
    r"\b(?:earlier|previous|prior|later|next|this|another|last|other|same|one|my|our|your) (?:work )?sessions?\b(?!'s? (?:fixture|scope))",
    r"\bsessions? (?:notes?|logs? of work)\b",
    r"\bteam-?mates?'?s?\b",
    r"\bhelper (?:sessions?|agents?|engineers?)\b",
    r"\b(?:AI|coding|LLM) agents?\b",
    r"\bagents?' (?:jobs|work|runs|sessions)\b",
    r"\bbefore the deadline\b",
    r"\bissues? ?#\d+",
    r"\bissue \d+\b",
    r"\bfrom the issues?\b",
    r"\bwork ?streams?\b",
    r"\buntil today\b",
    r"\btoday's (?:host|machine)\b",
    r"\blent (?:machines?|GPUs?|hosts?)\b",
]), re.IGNORECASE)


def _files():
    yield from (p for p in ROOT.glob("*") if p.is_file() and p.suffix in {".md", ".toml", ".cfg"})
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if (path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts
                    and path != Path(__file__).resolve() and not path.is_relative_to(THIRD_PARTY)):
                yield path


def test_the_project_speaks_of_itself_only():
    hits, read = [], 0
    for path in _files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        read += 1
        for n, line in enumerate(text.splitlines(), 1):
            if m := FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    assert read > 200, read    # the walk found the project
    assert not hits, "\n".join(hits)


def test_the_phrases_catch_how_the_work_was_done_and_spare_ordinary_words():
    caught = ["an earlier session measured it", "probes of the old code this session", "teammates' stores",
              "the agents' jobs on the host", "finished before the deadline", "(issue #11)", "see issue 28",
              "goal (from the issues)", "another teammate's YAMLs", "Until today SFT drew", "missed on today's host",
              "on a lent machine"]
    spared = ["the session fixture of conftest.py", "with tracking.session(ctx):", "Ray runs in a session of its own",
              "started once per test session", "the one atomic-write helper", "from helpers import run_jobs",
              "the worker's raylet and agents", "every wait has a deadline", "other agents' rows are counted",
              "scope=\"session\"", "start_new_session=True"]
    assert [s for s in caught if not FORBIDDEN.search(s)] == []
    assert [s for s in spared if FORBIDDEN.search(s)] == []


def test_commit_messages_speak_of_the_project_only():
    log = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%h%x00%B%x01", f"{COMMITS_SINCE}..HEAD"],
                         capture_output=True, text=True)
    assert log.returncode == 0, log.stderr   # the suite runs in a git clone (CI's is one)
    hits = []
    for entry in filter(str.strip, log.stdout.split("\x01")):
        sha, _, message = entry.strip().partition("\x00")
        hits += [f"{sha}: {m.group(0)!r}" for line in message.splitlines() if (m := FORBIDDEN.search(line))]
    assert not hits, "\n".join(hits)
