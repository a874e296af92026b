"""`jobs add` stores the kind the user gave or refuses, checks the folder is what the stages of that
kind read, and shows where the artifact came from; on stores of a few added folders, no job run."""
import json
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest


def folder(where: Path, files: dict[str, str]) -> Path:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    return where


ROWS = '{"prompt": "1+2=", "answer": "3"}\n{"prompt": "2+2=", "answer": "4"}\n'


@pytest.mark.parametrize("kind,files,says", [
    ("corpus", {"notes.txt": "1+1=2\n"}, "no train.txt"),
    ("sft-data", {"test.jsonl": ROWS}, "no train.jsonl"),
    ("pref-data", {"train.jsonl": ROWS}, "train.jsonl rows need prompt, chosen, rejected (its first row has answer, prompt)"),
    ("rl-prompts", {"train.jsonl": ROWS}, "no validation.jsonl"),
    ("eval-data", {"test.jsonl": "not json\n"}, "test.jsonl cannot be read as JSON lines"),
    ("model", {"config.json": "{}"}, "no weights"),
    ("tokenizer", {"vocab.txt": "a\n"}, "no tokenizer.json or tokenizer_config.json"),
])
def test_a_folder_without_the_layout_its_kind_needs_is_refused_at_add(tmp_path, kind, files, says):
    root = tmp_path / "store"
    src = folder(tmp_path / "mine", files)
    r = run_jobs(root, "add", str(src), "--kind", kind, "--name", "mine/x")
    assert r.code == 2 and r.out == "", r.out
    assert r.err.count("\n") == 1 and f"cannot be read as {kind}" in r.err and says in r.err, r.err
    assert not root.exists()                # refused before the store was made


def test_the_same_bytes_as_another_kind_are_refused_with_the_reason(tmp_path):
    root = tmp_path / "store"
    src = folder(tmp_path / "prompts", {"train.jsonl": ROWS, "validation.jsonl": ROWS})   # rl-prompts and sft-data both
    r = run_jobs(root, "add", str(src), "--kind", "rl-prompts", "--name", "mine/prompts")
    assert r.code == 0 and " rl-prompts  mine/prompts:v1 " in r.out, r.err
    before = tree_digest(root)
    again = run_jobs(root, "add", str(src), "--kind", "sft-data", "--name", "mine/sft")
    assert again.code == 2 and again.err.count("\n") == 1, again.err
    assert "of kind rl-prompts" in again.err and "cannot also be a sft-data" in again.err
    assert "--input ROLE=mine/prompts:v1" in again.err
    assert tree_digest(root) == before
    shown = json.loads(run_jobs(root, "show", "mine/prompts:v1", "--json").out)
    assert shown["kind"] == "rl-prompts"


def test_show_and_lineage_name_the_origin(tmp_path):
    root = tmp_path / "store"
    src = folder(tmp_path / "evalset", {"test.jsonl": ROWS})
    r = run_jobs(root, "add", str(src), "--kind", "eval-data", "--name", "mine/eval",
                 "--source", "https://example.org/sums", "--revision", "r7")
    assert r.code == 0, r.err
    shown = run_jobs(root, "show", "mine/eval:latest").out
    assert f"origin    https://example.org/sums @ r7 (added from {src} on " in shown, shown
    assert "[https://example.org/sums @ r7 " in run_jobs(root, "lineage", "mine/eval:latest").out
    graph = json.loads(run_jobs(root, "lineage", "mine/eval:latest", "--json").out)
    assert "https://example.org/sums @ r7" in graph["nodes"][0]["label"]
