"""nano3's whole chain at toy scale on the dev Slurm cluster: the prep stages for real, the torch
training stages reading nano3's prepared formats (stages/ml/formats.py), eval on vLLM (CPU), export.
Plus the format readers on their own (no cluster): what each turns a nano3 layout into."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
import make  # noqa: E402

from stages.ml import formats  # noqa: E402
from stages.ml import indexed  # noqa: E402

STAGES = ("prep_pretrain", "prep_sft", "prep_rl", "pretrain", "sft", "rm", "rl", "eval", "export")
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _output(store: Store, view, name: str) -> Path:
    return Path(store.artifact(view.outputs[name])["path"])


# --- the readers, on small hand-made folders -------------------------------------------------------

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


# --- the chain on the dev cluster ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.slurm
def test_nano3_chain_at_toy_scale_on_the_dev_cluster(tmp_path, slurm_cluster):
    src = tmp_path / "src"
    make.make(src)
    make.base_model(src)
    profiles = tmp_path / "profiles.yaml"
    # One node per stage: a profile sets nodes for every stage, and the non-Ray prep stages would run
    # once per node (prep_pretrain's two-node Ray run is tests/slurm/test_prep_on_slurm.py's).
    profiles.write_text("dev: {partition: debug, containers: false, nodes: 1, gpus_per_node: 0, cpus_per_task: 2, "
                        "mem_gb: 4, time: 30}\n")
    env = {"JOBS_PROFILES": str(profiles)}
    store_path = tmp_path / "store"
    r = run_jobs(store_path, "submit", "nano3", "--stage", "all", "--executor", "slurm", "--profile", "dev",
                 "--allow-unpinned", "tracking.wandb=disabled", *make.chain_overrides(src), env=env)
    assert r.code == 0, r.out + r.err
    runs = {line.split()[1]: line.split()[0] for line in r.out.splitlines() if "submitted as Slurm job" in line}
    assert sorted(runs) == sorted(STAGES)
    store = Store(store_path)
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        run_jobs(store_path, "status", env=env)
        views = {s: store.run(i) for s, i in runs.items()}
        if all(v.state in FINAL for v in views.values()):
            break
        time.sleep(5)
    assert {s: v.state for s, v in views.items()} == dict.fromkeys(STAGES, "SUCCEEDED"), \
        {s: (v.state, v.reason) for s, v in views.items() if v.state != "SUCCEEDED"}
    m = {s: v.metrics for s, v in views.items()}

    # pretrain read the Megatron shards of the blend: every document it packed is a shard's document.
    blend = _output(store, views["prep_pretrain"], "blend")
    prefixes = json.loads((blend / "blend.json").read_text())
    shard_docs = {tuple(d.tolist()) for p in prefixes for d in indexed.read(blend / p)}
    read_back = [tuple(x) for x in formats.blend_documents(blend)]
    assert shard_docs and set(read_back) <= shard_docs
    assert m["pretrain"]["pretrain/blocks"] == sum(len(d) for d in read_back) // 64
    # sft trained on Bridge's training.jsonl, rm on prep_sft's pairs, rl on prep_rl's prompts.
    sft_data, prefs = _output(store, views["prep_sft"], "sft"), _output(store, views["prep_sft"], "prefs")
    assert m["sft"]["sft/pairs"] == len(_rows(sft_data / "training.jsonl"))
    pairs = len(_rows(prefs / "train.jsonl"))
    assert m["rm"]["rm/held_out_pairs"] == pairs - int(pairs * 0.75)
    assert m["rl"]["rl/prompts"] == len(_rows(_output(store, views["prep_rl"], "prompts") / "train.jsonl"))
    # rl's rewards came from rm's model and moved the policy (a group of equal rewards has no gradient).
    assert m["rl"]["rl/zero_signal_groups"] < 4 and m["rl"]["rl/grad_norm"] > 0
    # eval: pass@k from vLLM on prep_rl's eval set.
    report = _output(store, views["eval"], "report")
    results = json.loads((report / "results.json").read_text())
    assert {"pass@1", "pass@4"} <= set(results) and all(0 <= results[k] <= 1 for k in ("pass@1", "pass@4"))
    assert len(_rows(report / "samples.jsonl")) == len(_rows(_output(store, views["prep_rl"], "eval") / "test.jsonl"))
    # export: the folder loads in a fresh interpreter and gives rl's model's logits.
    hf, rl_model = _output(store, views["export"], "hf"), _output(store, views["rl"], "model")
    check = ("import sys, torch; from transformers import AutoModelForCausalLM as M; "
             "a, b = (M.from_pretrained(p) for p in sys.argv[1:]); x = torch.tensor([[1, 5, 9, 20]]); "
             "assert torch.equal(a(x).logits, b(x).logits); print('ok')")
    p = subprocess.run([sys.executable, "-c", check, str(hf), str(rl_model)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
