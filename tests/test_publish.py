"""Every number the docs publish is what bench/publish.py renders from the raw files under
bench/results/ and from the tests' own thresholds: `--check` passes on the tree, and fails, naming
the block or the file, on a copy with a planted number, a deleted raw file or a changed margin.
Cheap: no training, only the script on copies of the docs.
"""
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "publish.py"
spec = importlib.util.spec_from_file_location("publish", SCRIPT)
publish = importlib.util.module_from_spec(spec)
spec.loader.exec_module(publish)


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--root", str(root)],
                          capture_output=True, text=True)


def copy(tmp_path: Path) -> Path:
    """The docs, the raw files and what the script reads of the recipes and tests, in a fresh folder."""
    root = tmp_path / "tree"
    for doc in publish.docs(ROOT):
        (root / doc.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(doc, root / doc.relative_to(ROOT))
    shutil.copytree(ROOT / "bench" / "results", root / "bench" / "results")
    for path in ("recipes/tiny/rl.yaml", "tests/stages/test_rl.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, root / path)
    return root


def block(text: str, name: str) -> re.Match:
    m = re.search(rf"<!-- publish:{name} -->\n(.*?)<!-- /publish:{name} -->", text, re.S)
    assert m, f"no block {name}"
    return m


def test_the_docs_are_what_the_raw_files_render():
    r = check(ROOT)
    assert r.returncode == 0, r.stderr
    # Every block is in a doc, and each renders numbers (not an empty block).
    text = "".join(doc.read_text() for doc in publish.docs(ROOT))
    for name in publish.BLOCKS:
        assert re.search(r"\d\.\d", block(text, name).group(1)), name


def test_a_planted_number_fails_the_check_and_publishing_restores_it(tmp_path):
    root = copy(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    m = block(text, "tiny-headline")
    number = re.search(r"\d\.(\d)\d\d", m.group(1))
    at = m.start(1) + number.start(1)
    readme.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
    r = check(root)
    assert r.returncode == 1
    assert "README.md: block tiny-headline differs" in r.stderr, r.stderr
    # Writing mode renders it back from the raw file.
    subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], check=True, capture_output=True)
    assert readme.read_text() == text
    assert check(root).returncode == 0


def test_a_deleted_raw_file_fails_the_check_naming_it(tmp_path):
    root = copy(tmp_path)
    (root / "bench" / "results" / publish.METHODS).unlink()
    r = check(root)
    assert r.returncode == 1
    assert f"raw file missing: bench/results/{publish.METHODS}" in r.stderr, r.stderr
    assert "block rl-seeds-summary" in r.stderr and "block rl-seeds-table" in r.stderr, r.stderr


def test_the_quoted_margins_are_the_tests_own(tmp_path):
    root = copy(tmp_path)
    test_rl = root / "tests" / "stages" / "test_rl.py"
    source = test_rl.read_text()
    margins = publish.test_constant(root, "tests/stages/test_rl.py", "MARGINS")
    greedy, pass1 = margins["grpo"]
    quoted = f"{greedy:+.2f} / {pass1:+.2f} for GRPO"
    assert quoted in (ROOT / "README.md").read_text() and quoted in (ROOT / "recipes/tiny/README.md").read_text()
    test_rl.write_text(source.replace(f'"grpo": ({greedy}, {pass1})', f'"grpo": ({greedy + 0.01:.2f}, {pass1})', 1))
    r = check(root)
    assert r.returncode == 1
    assert "README.md: block rl-margins differs" in r.stderr and "recipes/tiny/README.md: block rl-margins differs" in r.stderr


def test_a_block_without_its_markers_fails_the_check(tmp_path):
    root = copy(tmp_path)
    for doc in publish.docs(root):
        text = doc.read_text()
        doc.write_text(re.sub(r"<!-- /?publish:rm-table -->\n?", "", text))
    r = check(root)
    assert r.returncode == 1 and "block rm-table is in no doc" in r.stderr, r.stderr


#: What shapes the headline's numbers: the stages, the tiny recipe's configs, the job's runtime and
#: the script itself.
HEADLINE_CODE = ("stages", "recipes/tiny/*.yaml", "runtime", "bench/tiny.py")


def git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def last_code_change() -> str:
    """The newest commit that changed a line other than a comment in HEADLINE_CODE."""
    last = git("log", "-1", "--format=%H", r"-G^\s*[^#[:space:]]", "--", *HEADLINE_CODE).stdout.strip()
    assert last, "no git history here: this check reads the clone's"
    return last


def ran_after(commit: str, change: str) -> bool:
    return git("merge-base", "--is-ancestor", change, commit).returncode == 0


def test_the_headline_raw_file_ran_the_submitted_training_code():
    """README's headline is a bench/tiny.py run of this code: the raw file's commit holds the newest
    change to anything that shapes its numbers, so a later change to a stage fails here until
    bench/tiny.py runs again and publish.py renders it. A run one commit before that change fails."""
    raw, last = publish.Raw(ROOT, publish.TINY), last_code_change()
    assert ran_after(raw.commit, last), (
        f"bench/results/{publish.TINY} ran at {raw.commit}, before {last[:7]} changed {', '.join(HEADLINE_CODE)}: "
        "run `.venv/bin/python bench/record.py tiny -- .venv/bin/python bench/tiny.py`, then bench/publish.py")
    assert not ran_after(git("rev-parse", f"{last}~1").stdout.strip(), last)
