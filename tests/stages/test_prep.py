"""nano3's prep stages on small generated local sources, through the real CLI, checked against
direct tokenization and, where it is installed, megatron-core's own indexed-dataset reader."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import run_jobs, tree_digest
from jobs import recipes
from lineage import Store

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))
import make  # noqa: E402

from stages.ml import indexed  # noqa: E402

#: The interpreter of the Megatron-Bridge venv (dev/bridge_venv.sh); JOBS_MCORE_PYTHON names another.
MCORE_PYTHON = os.environ.get("JOBS_MCORE_PYTHON") or str(Path(__file__).parents[2] / ".venv-bridge" / "bin" / "python")
QUIET = ["tracking.wandb=disabled"]


def latest_run(store: Store, stage: str):
    row = next(iter(store.index().runs(stage=stage)))
    return store.run(row["id"])


def output(store: Store, view, name: str) -> Path:
    return Path(store.artifact(view.outputs[name])["path"])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """One store in which prep_pretrain, prep_sft and prep_rl ran on the generated sources."""
    src = tmp_path_factory.mktemp("nano3 sources")
    facts = make.make(src)
    store = tmp_path_factory.mktemp("prep store") / "store"
    toy = make.overrides(src)
    # Two environments here, to check the mix and prompt-only rows (nano3's own rl runs math only).
    toy["prep_rl"] += [f"prep_rl.sources=[{{name: math, path: '{src}/rl/math', env_map: {{math_with_judge_simple_agent: math}}}},"
                       f" {{name: chat, path: '{src}/rl/chat', prompt_only: true, env: reward_model}}]",
                       "prep_rl.mix={math: 0.8}", "+prep_rl.mix.reward_model=0.2"]
    for stage in ("prep_pretrain", "prep_sft", "prep_rl"):
        inputs = ["--input", "tokenizer=nano3/prep_pretrain/tokenizer:latest"] if stage == "prep_sft" else []
        r = run_jobs(store, "submit", "nano3", "--stage", stage, *inputs, *QUIET, *toy[stage])
        assert r.code == 0, r.out + r.err
    return {"store": Store(store), "src": src, **facts}


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _direct_docs(src: Path) -> dict[str, list[tuple]]:
    """Every document of each source tokenized here, EOS appended, empty texts skipped."""
    import pyarrow.parquet as pq

    tok = _tokenizer(src / "tokenizer")
    texts = {"web": [r["text"] for f in sorted((src / "pretrain/web").glob("*.jsonl")) for r in _rows(f)],
             "math": pq.read_table(src / "pretrain/math/part-0.parquet").column("text").to_pylist()}
    return {name: [tuple(tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]) for t in ts if t]
            for name, ts in texts.items()}


def test_prep_pretrain_writes_exactly_the_tokens_of_a_direct_tokenization(prepared):
    store, src = prepared["store"], prepared["src"]
    view = latest_run(store, "prep_pretrain")
    blend = output(store, view, "blend")
    direct = _direct_docs(src)
    manifest = json.loads((blend / "manifest.json").read_text())
    for name, docs in direct.items():
        written = [tuple(d.tolist()) for prefix in sorted((blend / name).glob("*.idx"))
                   for d in indexed.read(prefix.with_suffix(""))]
        assert Counter(written) == Counter(docs), name      # every document once, token for token
        assert view.metrics[f"prep/tokens/{name}"] == sum(map(len, docs))
        # valid_fraction 0.1: each shard holds out exactly floor(its documents / 10), evenly spaced.
        for i in range(3):
            n = {split: len(indexed.read(blend / name / f"{split}_{i:05d}"))
                 if (blend / name / f"{split}_{i:05d}.idx").exists() else 0 for split in ("train", "valid")}
            assert n["valid"] == (n["train"] + n["valid"]) // 10
        assert manifest["sources"][name]["valid_documents"] >= 1
    assert view.metrics["prep/tokens"] == sum(len(d) for docs in direct.values() for d in docs)
    assert view.metrics["prep/ray_nodes"] == 1                  # one local node here; Slurm spreads over the job's
    # Each source's shards carry its normalised weight (3:1), train and valid alike.
    for file in ("blend.json", "blend_valid.json"):
        weights = json.loads((blend / file).read_text())
        assert sum(w for p, w in weights.items() if p.startswith("web/")) == pytest.approx(0.75)
        assert sum(w for p, w in weights.items() if p.startswith("math/")) == pytest.approx(0.25)
        assert all(Path(str(blend / p) + ".bin").is_file() for p in weights)
    # The tokenizer output is the tokenizer the shards were written with.
    tok_out = output(store, view, "tokenizer")
    text = "seven plus seven is 14. quiet river"
    assert _tokenizer(tok_out)(text)["input_ids"] == _tokenizer(src / "tokenizer")(text)["input_ids"]


def _needs(module: str) -> None:
    """Fail, saying why, unless `module` imports in the Megatron venv (the test command builds it)."""
    probe = subprocess.run([MCORE_PYTHON, "-c", f"import {module}"], capture_output=True, text=True,
                           timeout=300) if Path(MCORE_PYTHON).is_file() else None
    if probe is None or probe.returncode:
        why = "absent" if probe is None else (probe.stderr.strip().splitlines() or ["?"])[-1]
        reason = (f"{module} does not import with {MCORE_PYTHON} ({why}): "
                  "dev/bridge_venv.sh builds that venv, or set JOBS_MCORE_PYTHON")
        pytest.fail(reason)


def test_a_shard_stops_at_its_token_budget(tmp_path):
    """max_tokens is split over sources and shards; a shard ends with the document that reaches its share."""
    from stages.prep.pretrain import portable_tokenizer, tokenize_shard

    src = tmp_path / "src"
    make.make(src)
    portable_tokenizer(src / "tokenizer")
    docs = _direct_docs(src)["math"]
    source = {"name": "math", "path": str(src / "pretrain/math"), "text_field": "text"}
    opts = {"min_doc_chars": None, "max_doc_tokens": None, "valid_fraction": 0.0, "add_bos": False,
            "add_eos": True, "dtype": "uint16"}
    out = tokenize_shard(source, 0, 1, 50, str(src / "tokenizer"), str(tmp_path / "out"), opts)
    k = next(i for i in range(1, len(docs) + 1) if sum(map(len, docs[:i])) >= 50)
    assert out["train"] == {"documents": k, "tokens": sum(map(len, docs[:k]))}
    assert [tuple(d.tolist()) for d in indexed.read(tmp_path / "out" / "math" / "train_00000")] == docs[:k]
    # Two shards of one file: every other row each, all rows between them.
    halves = [tokenize_shard(source, i, 2, 1e9, str(src / "tokenizer"), str(tmp_path / "two"), opts) for i in (0, 1)]
    assert [h["train"]["documents"] for h in halves] == [(len(docs) + 1) // 2, len(docs) // 2]
    assert [tuple(d.tolist()) for d in indexed.read(tmp_path / "two" / "math" / "train_00001")] == docs[1::2]


def test_megatron_cores_reader_reads_back_exactly_the_tokens_written(prepared):
    _needs("megatron.core.datasets.indexed_dataset")
    store = prepared["store"]
    blend = output(store, latest_run(store, "prep_pretrain"), "blend")
    prefixes = [str(p.with_suffix("")) for p in sorted(blend.rglob("*.idx"))]
    script = ("import json, sys\nfrom megatron.core.datasets.indexed_dataset import IndexedDataset\n"
              "out = {}\nfor p in json.loads(sys.argv[1]):\n    d = IndexedDataset(p)\n"
              "    out[p] = {'dtype': d.index.dtype.__name__, 'docs': [d[i].tolist() for i in range(len(d))],"
              " 'document_indices': d.document_indices.tolist()}\nprint(json.dumps(out))\n")
    p = subprocess.run([MCORE_PYTHON, "-c", script, json.dumps(prefixes)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(got) == len(prefixes) >= 6
    for prefix in prefixes:
        ours = [d.tolist() for d in indexed.read(Path(prefix))]
        assert got[prefix]["docs"] == ours
        assert got[prefix]["dtype"] == "uint16"             # vocabulary of 400 < 65500, megatron-core's choice
        assert got[prefix]["document_indices"] == list(range(len(ours) + 1))


def test_prep_sft_renders_chats_with_the_template_and_packs_every_token(prepared):
    store, src = prepared["store"], prepared["src"]
    view = latest_run(store, "prep_sft")
    sft = output(store, view, "sft")
    tok = _tokenizer(src / "tokenizer")
    chats = _rows(src / "sft/chats/train.jsonl")
    rendered = {tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False) for c in chats}
    rows = _rows(sft / "training.jsonl") + _rows(sft / "validation.jsonl")
    assert len(rows) == len(chats) - 1 and view.metrics["prep/sft/dropped_overlong"] == 1
    stripped = 0
    for r in rows:
        assert r["input"].endswith("<|im_start|>assistant\n") and r["output"].endswith("<|im_end|>\n")
        full = r["input"] + r["output"]
        if full not in rendered:                            # reasoning_off: the trace was emptied
            assert "<think></think>" in r["output"]
            stripped += 1
    assert 0 < stripped < sum("<think>" in c["messages"][-1]["content"] for c in chats)
    assert any("Tools:" in r["input"] for r in rows)          # tool schemas reach the system turn
    # The bins hold every row's tokens once, never more than pack_size, loss only on answer tokens.
    import numpy as np

    bridge = json.loads((sft / "bridge.json").read_text())
    specs = bridge["packed_sequence_specs"]
    for split, name in (("training", "packed_train_data_path"), ("validation", "packed_val_data_path")):
        bins = np.load(sft / specs[name], allow_pickle=True)
        want = Counter(tuple(tok(r["input"] + r["output"], add_special_tokens=False)["input_ids"])
                       for r in _rows(sft / f"{split}.jsonl"))
        got, answer_tokens = Counter(), 0
        for b in bins:
            assert len(b["input_ids"]) <= 128 == specs["packed_sequence_size"]
            edges = b["seq_start_id"] + [len(b["input_ids"])]
            got.update(tuple(b["input_ids"][s:e]) for s, e in zip(edges, edges[1:]))
            answer_tokens += sum(b["loss_mask"])
        assert got == want, split
        assert answer_tokens == sum(len(tok(r["output"], add_special_tokens=False)["input_ids"])
                                    for r in _rows(sft / f"{split}.jsonl"))
    meta = json.loads((sft / specs["packed_metadata_path"]).read_text())
    assert [m["pack_size"] for m in meta] == [128, 128]


def test_megatron_bridges_finetuning_datasets_read_the_sft_layout(prepared, tmp_path):
    """Bridge 0.3.1's GPTSFTDataset tokenizes our JSONL to exactly our ids, with the answer where we
    put it; its GPTSFTPackedDataset loads our bins and trains on exactly the answer tokens."""
    _needs("megatron.core")
    store = prepared["store"]
    sft = output(store, latest_run(store, "prep_sft"), "sft")
    tok_dir = output(store, latest_run(store, "prep_pretrain"), "tokenizer")
    script = Path(__file__).parents[1] / "fixtures" / "nano3_sources" / "bridge_read.py"
    p = subprocess.run([MCORE_PYTHON, str(script), str(sft), str(tok_dir), str(tmp_path)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    tok = _tokenizer(tok_dir)
    rows = _rows(sft / "training.jsonl")
    want = [(tok(r["input"], add_special_tokens=False)["input_ids"], tok(r["output"], add_special_tokens=False)["input_ids"])
            for r in rows]
    assert [g["input_ids"] for g in got["rows"]] == [c + a for c, a in want]
    assert [g["answer_start_idx"] for g in got["rows"]] == [len(c) for c, _ in want]
    assert got["type"] == "GPTSFTPackedDataset"
    assert got["bins"] == len(np_load(sft / "packed" / "training_128.npy"))
    assert got["loss_tokens"] == sum(len(a) for _, a in want)


def np_load(path: Path):
    import numpy as np

    return np.load(path, allow_pickle=True)


def test_prep_sft_writes_preference_pairs_as_nemo_rl_reads_them(prepared):
    store, src = prepared["store"], prepared["src"]
    view = latest_run(store, "prep_sft")
    prefs = output(store, view, "prefs")
    rows = _rows(prefs / "train.jsonl") + _rows(prefs / "validation.jsonl")
    hs = _rows(src / "prefs/helpsteer3/train.jsonl")
    strong = [h for h in hs if abs(h["overall_preference"]) >= 2]       # recipe default min_strength 2
    assert len(rows) == len(strong) + len(_rows(src / "prefs/pairs/train.jsonl"))
    by_context = {h["context"][0]["content"]: h for h in strong}
    for r in rows:
        ranks = {c["rank"]: c["completion"][0]["content"] for c in r["completions"]}
        assert set(ranks) == {0, 1} and r["context"][-1]["role"] == "user"
        assert r["prompt"].endswith("<|im_start|>assistant\n") and r["chosen"] == ranks[0] + "<|im_end|>\n"
        h = by_context.get(r["context"][0]["content"])
        if h is not None:
            winner = h["response1"] if h["overall_preference"] < 0 else h["response2"]
            assert ranks[0] == winner


def test_prep_rl_drops_exactly_the_planted_contaminated_prompts(prepared):
    store, src = prepared["store"], prepared["src"]
    view = latest_run(store, "prep_rl")
    prompts, ev = output(store, view, "prompts"), output(store, view, "eval")
    train, valid, test = _rows(prompts / "train.jsonl"), _rows(prompts / "validation.jsonl"), _rows(ev / "test.jsonl")
    assert view.metrics["prep/rl/decontaminated"] == len(prepared["planted"]) == 3
    math = [r for r in _rows(src / "rl/math/train.jsonl")
            if r["agent_ref"]["name"] == make.MATH_AGENT and r.get("_hf_placeholder") is None]
    used = {r["prompt"]: r["answer"] for r in train + valid if r["task_name"] == "math"} | \
           {r["prompt"]: r["answer"] for r in test if r["source"] == "held_out"}
    # NVIDIA's blend layout: the prompt is the request's user turn, the answer its expected_answer
    assert used == {r["responses_create_params"]["input"][-1]["content"]: r["expected_answer"] for r in math
                    if r["question"] not in prepared["planted"]}
    assert len(valid) == 8 and {r["task_name"] for r in train + valid} == {"math", "reward_model"}
    assert view.metrics["prep/rl/dropped_unmapped_env"] == prepared["n_code"]
    assert view.metrics["prep/rl/dropped_placeholder"] == prepared["n_placeholder"]
    assert all(r["answer"] for r in train if r["task_name"] == "math")
    assert [r for r in test if r["source"] == "bench"] == [
        {"prompt": b["problem"], "answer": b["answer"], "source": "bench"} for b in prepared["bench"]]
    assert sum(r["source"] == "held_out" for r in test) == 5


def test_prep_rl_reads_nvidias_rl_blend_rows_with_nano3s_own_agent_map(tmp_path):
    """Rows as Nemotron's RL data prep writes them (question, expected_answer, responses_create_params,
    dataset; NeMo Gym routes by agent_ref.name), read with nano3's own prep_rl source settings: the math
    agent's rows become ResponseDataset rows, other agents' rows and `_hf_placeholder` rows are counted."""
    src = tmp_path / "src"
    facts = make.make(src)
    store = tmp_path / "store"
    blend = dict(recipes.compose(recipes.load("nano3"), "prep_rl", [])["prep_rl"]["sources"][0])
    env_map = ", ".join(f"{k}: {v}" for k, v in blend["env_map"].items())     # nano3's own: agent -> environment
    source = f"{{name: blend, path: '{src}/rl/math', env_map: {{{env_map}}}}}"
    r = run_jobs(store, "submit", "nano3", "--stage", "prep_rl", *QUIET, f"prep_rl.sources=[{source}]",
                 *make.overrides(src)["prep_rl"][1:])
    assert r.code == 0, r.out + r.err
    view = latest_run(Store(store), "prep_rl")
    prompts = output(Store(store), view, "prompts")
    rows = _rows(prompts / "train.jsonl") + _rows(prompts / "validation.jsonl")
    blend_rows = [x for x in _rows(src / "rl/math/train.jsonl") if x.get("agent_ref", {}).get("name") == make.MATH_AGENT
                  and "expected_answer" in x]
    expected = {x["responses_create_params"]["input"][-1]["content"]: x["expected_answer"] for x in blend_rows}
    assert rows and all(expected[x["prompt"]] == x["answer"] and x["task_name"] == "math" for x in rows)
    assert view.metrics["prep/rl/dropped_unmapped_env"] == facts["n_code"]
    assert view.metrics["prep/rl/dropped_placeholder"] == facts["n_placeholder"]
    manifest = json.loads((prompts / "manifest.json").read_text())
    assert manifest["train"] == len(_rows(prompts / "train.jsonl"))


def test_prep_rl_resolves_the_blends_placeholder_rows_and_refuses_a_blend_that_leaves_math_empty(store_path, tmp_path):
    """A blend shaped like NVIDIA's, whose math rows are all `_hf_placeholder` rows: without resolving them
    math gets no prompt, refused at submit; resolved through a hub mirror (copies of DAPO and Skywork laid
    out as their hub repositories, read by the datasets library) with nano3's own targets, every one of
    them becomes the prompt its template defines, and the job counts what it kept per environment."""
    src = tmp_path / "src"
    facts = make.make(src)
    toy = ["prep_rl.eval.held_out=2", "prep_rl.valid_size=2", *make.overrides(src)["prep_rl"][1:2], "prep_rl.decontaminate.ngram=8"]

    def source(resolve: bool) -> str:
        return (f"prep_rl.sources=[{{name: blend, path: '{src}/rl/blend', env_map: {{{make.MATH_AGENT}: math}}, "
                f"resolve_placeholders: {str(resolve).lower()}}}]")

    before = tree_digest(store_path)
    r = run_jobs(store_path, "submit", "nano3", "--stage", "prep_rl", *QUIET, *toy, source(False))
    assert r.code == 2, r.out + r.err
    assert len(r.err.strip().splitlines()) == 1 and "prep_rl.mix.math: no source row would become a 'math' prompt" in r.err
    assert "18 _hf_placeholder rows with resolve_placeholders off" in r.err, r.err
    assert tree_digest(store_path) == before

    r = run_jobs(store_path, "submit", "nano3", "--stage", "prep_rl", *QUIET, *toy, source(True),
                 f"prep_rl.hub_mirror={src}/hub")
    assert r.code == 0, r.out + r.err
    store = Store(store_path)
    view = latest_run(store, "prep_rl")
    prompts, ev = output(store, view, "prompts"), output(store, view, "eval")
    rows = _rows(prompts / "train.jsonl") + _rows(prompts / "validation.jsonl")
    held = [x for x in _rows(ev / "test.jsonl") if x["source"] == "held_out"]
    assert {x["prompt"]: x["answer"] for x in rows + held} == facts["resolved"]
    assert {x["task_name"] for x in rows} == {"math"}
    m = view.metrics
    assert m["prep/rl/placeholder_resolved"] == len(facts["resolved"]) == 16
    assert m["prep/rl/placeholder_bad_row"] == 1 and m["prep/rl/placeholder_unknown_dataset"] == 1
    assert m["prep/rl/dropped_placeholder"] == 2 and m["prep/rl/dropped_unmapped_env"] == facts["n_blend_code"]
    assert m["prep/rl/kept/math"] == 16 - 2 and m["prep/rl/train/math"] == 16 - 2 - 2
    manifest = json.loads((prompts / "manifest.json").read_text())
    assert manifest["kept_per_env"] == {"math": 14} and manifest["per_env"] == {"math": 12}


@pytest.mark.parametrize("stage,override,says", [
    ("prep_pretrain", "prep_pretrain.sources=[{name: web, text_field: text, weight: 1}]", "prep_pretrain.sources[0].path is missing"),
    ("prep_pretrain", "prep_pretrain.sources=[{name: web, path: 'hf://x/y', text_field: text, weight: 0}]", "weight must be a number > 0"),
    ("prep_pretrain", "prep_pretrain.sources=[{name: web, path: 'relative/dir', text_field: text, weight: 1}]", "must be absolute"),
    ("prep_rl", "prep_rl.decontaminate.ngram=0", "prep_rl.decontaminate.ngram must be an integer in [1, 1000]"),
    ("prep_rl", "prep_rl.sources=[{name: c, path: 'hf://x/y', prompt_only: true, env: reward_model}]",
     "environment 'reward_model' is not in prep_rl.mix"),
    ("prep_rl", "prep_rl.mix.math=-1", "prep_rl.mix.math must be a number > 0"),
    ("prep_rl", "prep_rl.hub_mirror=/", "prep_rl.sources[0].path hf://nvidia/Nemotron-3-Nano-RL-Training-Blend: the hub mirror has no copy"),
    ("prep_rl", "~prep_rl.placeholders", "prep_rl.sources[0].resolve_placeholders needs prep_rl.placeholders"),
    ("prep_pretrain,prep_sft", "prep_sft.packing_algorithm=best_fit", "prep_sft.packing_algorithm must be one of"),
])
def test_bad_prep_config_is_refused_at_submit_in_one_line(store_path, stage, override, says):
    before = tree_digest(store_path)
    r = run_jobs(store_path, "submit", "nano3", "--stage", stage, "--dry-run", override)
    assert r.code == 2, r.out + r.err
    assert says in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert tree_digest(store_path) == before


def test_the_slurm_dry_run_shows_each_prep_stages_plan(store_path):
    r = run_jobs(store_path, "submit", "nano3", "--stage", "prep_pretrain,prep_sft,prep_rl", "--executor", "slurm",
                 "--dry-run")
    assert r.code == 0, r.err
    assert "# prep_pretrain: 5 sources x 64 shards = 320 Ray tasks (SPREAD), at most 48 per node x 2 nodes" in r.out
    assert "packed into 4096-token bins" in r.out and "sharing a 13-gram with an eval prompt dropped" in r.out
