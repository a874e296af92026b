"""The tiny data stage's splits hold out what they say: by unordered operand pair, so no held-out
prompt, nor its commuted twin, is in a training split or in the pretraining corpus.

Reads the data stage's artifacts in the session's `data_store` (tests/conftest.py: one real
`jobs submit tiny --stage data`).
"""
import json
import re
from pathlib import Path

import pytest

from jobs import recipes
from lineage import Store


def _outputs(data_store) -> dict[str, Path]:
    store = Store(data_store)
    (row,) = store.index().runs(stage="data")
    view = store.run(row["id"])
    return {role: Path(store.artifact(art)["path"]) for role, art in view.outputs.items()}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _operands(prompt: str) -> tuple[int, int]:
    a, b = prompt.removesuffix("=").split("+")
    return int(a), int(b)


def test_no_held_out_prompt_or_its_commuted_twin_is_in_a_training_split_or_the_corpus(data_store):
    out = _outputs(data_store)
    test = [_operands(r["prompt"]) for r in _rows(out["eval"] / "test.jsonl")]
    dev = [_operands(r["prompt"]) for r in _rows(out["prefs"] / "validation.jsonl")]
    rl_val = [_operands(r["prompt"]) for r in _rows(out["rl"] / "validation.jsonl")]
    training = {name: [_operands(r["prompt"]) for r in _rows(path)] for name, path in (
        ("sft", out["sft"] / "train.jsonl"), ("prefs", out["prefs"] / "train.jsonl"), ("rl", out["rl"] / "train.jsonl"))}
    corpus_sums = [_operands(m.group(1)) for m in re.finditer(r"^(\d+\+\d+=)", (out["corpus"] / "train.txt").read_text(), re.M)]
    assert len(corpus_sums) > 5000 and all(len(rows) >= 2000 for rows in training.values())

    # One prompt per unordered pair in each held-out split: no duplicate, no twin inside a split.
    unordered = lambda pairs: {tuple(sorted(p)) for p in pairs}   # noqa: E731
    assert len(test) == len(unordered(test)) == 500 and len(dev) == len(unordered(dev)) == 400
    assert rl_val == dev[:200]          # rl validates on dev prompts, never on the test split
    # Each held-out pair, in either order, is absent from the other held-out split, every training
    # split and the corpus's sums.
    assert not unordered(test) & unordered(dev)
    for name, pairs in {**training, "corpus": corpus_sums}.items():
        seen = unordered(pairs)
        assert not unordered(test) & seen, f"a test pair is in {name}"
        assert not unordered(dev) & seen, f"a dev pair is in {name}"
    # The preference validation pairs are the same kinds as the training ones, half each.
    kinds = [r["kind"] for r in _rows(out["prefs"] / "validation.jsonl")]
    assert kinds.count("sum") == kinds.count("style") == 200


@pytest.mark.parametrize("overrides, message", [
    (["data.n_dev=4600"], "data.n_eval 500 + data.n_dev 4600 must leave training pairs"),
    (["data.n_rl_val=401"], "data.n_rl_val 401 > data.n_dev 400"),
    (["data.max_operand=10", "data.n_eval=6", "data.n_dev=5", "data.n_rl_val=5"], "11 unordered pairs can be held out"),
])
def test_check_config_refuses_splits_that_leave_no_training_pairs(overrides, message):
    from stages import data

    problems = data.check_config(recipes.compose(recipes.load("tiny"), "data", overrides))
    assert len(problems) == 1 and message in problems[0], problems


def test_the_tokenizer_folder_is_what_transformers_saves_for_that_tokenizer(tmp_path):
    """The data stage writes its tokenizer without importing transformers; the folder must be the one
    transformers' own save_pretrained writes for the same trained tokenizer, and load back as it."""
    from tokenizers import Tokenizer, decoders, models, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from stages import data

    corpus = tmp_path / "train.txt"
    corpus.write_text("0 1 2 3 4 5 6 7 8 9\n12+30=42\n7+8=15\n")
    ours = data._train_tokenizer(tmp_path / "ours", corpus)
    # The same trained tokenizer, left for transformers to complete and save.
    raw = Tokenizer(models.BPE(unk_token=None))
    raw.decoder = decoders.Fuse()
    raw.train([str(corpus)], trainers.BpeTrainer(vocab_size=len(data.SPECIALS) + len(data.ALPHABET), show_progress=False,
                                                 special_tokens=data.SPECIALS, initial_alphabet=list(data.ALPHABET)))
    theirs = tmp_path / "theirs"
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>").save_pretrained(theirs)
    assert sorted(f.name for f in theirs.iterdir()) == sorted(f.name for f in ours.iterdir())
    for f in theirs.iterdir():
        assert (ours / f.name).read_bytes() == f.read_bytes(), f.name
    tok = AutoTokenizer.from_pretrained(ours)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.decode(tok("45+17=62")["input_ids"]) == "45+17=62" and len(tok("45+17=62")["input_ids"]) == 8
