"""Helpers the tests share: the real `jobs` command in a subprocess, a digest of a whole tree, and a
store's newest run of a stage."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from lineage import Store

JOBS = str(Path(sys.executable).parent / "jobs")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_jobs(store: Path, *args: str, env: dict | None = None, timeout: float = 600) -> Result:
    """The installed console script in a subprocess, exactly as a user runs it."""
    p = subprocess.run([JOBS, "--store", str(store), *args], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=timeout)
    return Result(p.returncode, p.stdout, p.stderr)


def count_once(tmp: Path, env: dict) -> Path:
    """`tmp/store`, in which the test recipe testchain's count stage (tests/fixtures) succeeded once."""
    (tmp / "home").mkdir()
    root = tmp / "store"
    r = run_jobs(root, "submit", "testchain", "--stage", "count", "count.steps=2", "count.step_s=0", env=env)
    assert r.code == 0, r.err
    return root


def tree_digest(root: Path) -> str:
    """Every path, mode and byte under `root`: equal digests mean the tree did not change at all."""
    h = hashlib.sha256()
    if not root.exists():
        return "absent"
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames) + [""]:
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}|{st.st_mode}|{st.st_size}\n".encode())
            if name:
                h.update(p.read_bytes())
    return h.hexdigest()


def ray_pids(needle: str) -> list[int]:
    """Processes whose command line or environment contains `needle`, read from /proc.

    Ray's workers retitle themselves (`ray::Actor`), so only their environment still names the temp dir.
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if any(needle.encode() in (entry / f).read_bytes() for f in ("cmdline", "environ")):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def tree_state(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """path -> (mode, size, digest of the bytes) for everything under `root`, links and FIFOs included.

    Nothing but regular files is opened, so a planted FIFO cannot hang the test; `skip` leaves out
    folders (the per-host cache) that may change without breaking a promise.
    """
    state: dict[str, tuple] = {}
    if not os.path.lexists(root):
        return state
    skipped = {str(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in skipped)
        for name in [""] + sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if name and p.is_file() and not p.is_symlink() else None
            target = os.readlink(p) if p.is_symlink() else None
            state[str(p.relative_to(root))] = (st.st_mode, st.st_size if digest else None, digest, target)
    return state


def latest(store: Store, stage: str, **match):
    """The newest SUCCEEDED run of `stage` whose inputs include `match`."""
    for row in store.index().runs(stage=stage):
        view = store.run(row["id"])
        if view.state == "SUCCEEDED" and all(view.inputs.get(k) == v for k, v in match.items()):
            return view
    raise AssertionError(f"no succeeded {stage} run with inputs {match}")


def artifact_path(store: Store, art: str) -> Path:
    """Where the store keeps an artifact's files."""
    return Path(store.artifact(art)["path"])


TEAM, MATE = "jobsteam", "jobsmate"


def ensure_mate() -> None:
    """The team's group and a second member of it (no home, no login); needs root."""
    import pwd

    subprocess.run(["groupadd", "-f", TEAM], check=True)
    try:
        pwd.getpwnam(MATE)
    except KeyError:
        subprocess.run(["useradd", "-M", "-N", "-g", TEAM, "-s", "/bin/sh", MATE], check=True)


@contextmanager
def team_store() -> Iterator[tuple[Path, Path]]:
    """(top, store): a store folder of the team's group (setgid, 2770) in a fresh folder under /tmp
    that a second user may enter (pytest's own folders are 0700); removed afterwards, read-only
    artifacts included. Makes the team's second member first (needs root)."""
    import grp
    import shutil
    import tempfile

    ensure_mate()
    top = Path(tempfile.mkdtemp(prefix="jobs-team-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        store = top / "store"
        store.mkdir()
        os.chown(store, -1, grp.getgrnam(TEAM).gr_gid)
        os.chmod(store, 0o2770)
        yield top, store
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(top)])
        shutil.rmtree(top, ignore_errors=True)


def run_jobs_as(user: str, store: Path, *args: str, home: Path, timeout: float = 120) -> Result:
    """The CLI of this checkout run as another Unix user, by the system's Python (the venv's
    interpreter lives where only its owner may run it) with this checkout and the venv's packages on
    sys.path; `home` (the user's own) holds their cache."""
    import pwd

    os.chown(home, pwd.getpwnam(user).pw_uid, -1)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    p = subprocess.run(["runuser", "-u", user, "--", "env", f"JOBS_CACHE_DIR={home}", f"HOME={home}",
                        f"PYTHONPYCACHEPREFIX={home}/pyc", "/usr/bin/python3", "-c",
                        "import sys; sys.path[:0] = sys.argv[1:3]; del sys.argv[1:3]; sys.argv[0] = 'jobs'; "
                        "from jobs.cli import main; sys.exit(main())",
                        str(Path(__file__).parents[1]), site, "--store", str(store), *args],
                       capture_output=True, text=True, timeout=timeout, cwd="/")
    return Result(p.returncode, p.stdout, p.stderr)
