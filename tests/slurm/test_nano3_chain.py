"""The readers of nano3's prepared formats on their own, on small hand-made folders: what each turns a
nano3 layout into. The whole chain reading them on the dev cluster, through the container path, is
tests/slurm/test_containers_on_slurm.py's."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
import make  # noqa: E402

from stages import formats  # noqa: E402
from stages.prep import indexed  # noqa: E402


def test_blend_documents_give_each_prefix_its_weight_of_the_tokens(tmp_path):
    import numpy as np

    for name, docs in (("a/train_00000", [[1, 2, 3, 4]] * 5), ("b/train_00000", [[9, 9]] * 10),
                       ("c/train_00000", [])):
        w = indexed.IndexedWriter(tmp_path / name, np.uint16)
        for d in docs:
            w.add(d)
        w.close()
    (tmp_path / "blend.json").write_text(json.dumps({"a/train_00000": 3, "b/train_00000": 1, "c/train_00000": 2}))
    docs = formats.blend_documents(tmp_path)
    a, b = sum(len(d) for d in docs if d[0] == 1), sum(len(d) for d in docs if d[0] == 9)
    # 40 tokens in the non-empty shards: a takes 3/4 (30, so 8 of its 4-token documents: one epoch and
    # a bit), b 1/4 (10: 5 of its 10 documents); the empty shard is skipped, not looped on.
    assert (a, b) == (32, 10)
    r = indexed.Reader(tmp_path / "a/train_00000")
    assert [r[i].tolist() for i in range(len(r))] == [d.tolist() for d in indexed.read(tmp_path / "a/train_00000")]


def test_bridges_sft_layout_becomes_prompt_answer_pairs(tmp_path):
    (tmp_path / "training.jsonl").write_text(json.dumps({"input": "<|im_start|>user\nhi", "output": "yo<|im_end|>\n"}) + "\n")
    assert formats.sft_pairs(tmp_path) == [{"prompt": "<|im_start|>user\nhi", "answer": "yo<|im_end|>\n"}]
    (tmp_path / "training.jsonl").write_text(json.dumps({"input": "x"}) + "\n")
    with pytest.raises(ValueError, match="row 1 has no output"):
        formats.sft_pairs(tmp_path)


def test_rl_prompts_of_an_environment_without_a_verifier_are_refused(tmp_path):
    rows = [{"prompt": "1+1", "answer": "2", "task_name": "math"}, {"prompt": "chat", "answer": "", "task_name": "reward_model"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="reward_model have no verifier"):
        formats.rl_prompts(tmp_path, "train")


def test_a_base_model_of_another_size_is_refused(tmp_path):
    src = tmp_path / "src"
    make.make(src)
    make.base_model(src)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src / "tokenizer")
    config = {"base_model": {"hf_model_id": str(src / "base")}}
    model = formats.base_model(config, {**make.BASE, "max_len": 64}, tok)
    assert model.config.hidden_size == make.BASE["hidden"]
    with pytest.raises(ValueError, match="model.layers 3 but the base model's is 2"):
        formats.base_model(config, {**make.BASE, "layers": 3}, tok)
