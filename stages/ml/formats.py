"""Readers from each data artifact's layout to what the torch stages consume, so the same CPU
training loops read tiny's files and nano3's prepared formats (the contracts between nano3's stages).

    pretrain   tiny: corpus/train.txt (text lines)      nano3: blend.json + Megatron indexed shards
               -> token rows, one per document, EOS-terminated (tiny's also start with <bos>)
    sft        tiny: train.jsonl {prompt, answer}       nano3: Bridge's training.jsonl {input, output}
               -> [{"prompt", "answer"}]   (the template's rendering; packing is Bridge's, not ours)
    prefs      tiny and nano3: train.jsonl {prompt, chosen, rejected} (nano3's rows also carry NeMo RL's
               context/completions; the rendered strings are the same pair)
    rl         tiny and nano3: train.jsonl / validation.jsonl {prompt, answer} (nano3 adds task_name)
    base model nano3's base_model.hf_model_id, when it is a local HF folder: torch pretrain continues
               from it instead of building a fresh model from `model:`.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages.ml import lm
from stages.contract import StageError

TASKS = ("math",)   # prep_rl environments whose answers the torch rl's verifier checks


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise StageError(f"{path.parent.name}: no {path.name} in {path.parent}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _need(rows: list[dict], keys: tuple[str, ...], path: Path) -> list[dict]:
    for n, r in enumerate(rows):
        missing = [k for k in keys if k not in r]
        if missing:
            raise StageError(f"{path} row {n + 1} has no {', '.join(missing)} (it holds {', '.join(sorted(r))})")
    return rows


def pretrain_documents(corpus: Path, tokenizer) -> list[list[int]]:
    """Token rows of the corpus: the blend's shards when the folder has blend.json, else text lines."""
    if (corpus / "blend.json").is_file():
        return blend_documents(corpus, "blend.json")
    lines = (corpus / "train.txt").read_text().splitlines()
    return lm.encode(tokenizer, lines, bos=True, eos=True)


def blend_documents(folder: Path, name: str = "blend.json") -> list[list[int]]:
    """The documents of a Megatron blend {prefix: weight}, each prefix taking its weight's share of
    the tokens (weights normalised), as Megatron's blended dataset samples: a prefix short of its
    share is repeated from its start (an epoch), one over it is cut at the document that reaches it."""
    from stages.ml.indexed import Reader

    blend = json.loads((folder / name).read_text())
    if not isinstance(blend, dict) or not blend:
        raise StageError(f"{folder / name} is not a non-empty {{prefix: weight}} object")
    shards = {p: Reader(folder / p) for p, w in blend.items() if w > 0}
    shards = {p: r for p, r in shards.items() if int(r.lengths.sum()) > 0}
    if not shards:
        raise StageError(f"{folder / name}: every shard it names is empty")
    total_tokens = sum(int(r.lengths.sum()) for r in shards.values())
    total_weight = sum(blend[p] for p in shards)
    docs: list[list[int]] = []
    for prefix, reader in sorted(shards.items()):
        target, taken, i = blend[prefix] / total_weight * total_tokens, 0, 0
        while taken < target:
            doc = reader[i % len(reader)]
            docs.append(doc.tolist())
            taken += len(doc)
            i += 1
    return docs


def sft_pairs(data: Path) -> list[dict]:
    """{"prompt", "answer"} rows: Bridge's training.jsonl {input, output} when present, else tiny's."""
    if (data / "training.jsonl").is_file():
        rows = _need(_jsonl(data / "training.jsonl"), ("input", "output"), data / "training.jsonl")
        return [{"prompt": r["input"], "answer": r["output"]} for r in rows]
    return _need(_jsonl(data / "train.jsonl"), ("prompt", "answer"), data / "train.jsonl")


def preference_pairs(data: Path, split: str = "train") -> list[dict]:
    """{"prompt", "chosen", "rejected"} rows of train.jsonl or validation.jsonl (tiny's and prep_sft's
    prefs alike)."""
    path = data / f"{split}.jsonl"
    return _need(_jsonl(path), ("prompt", "chosen", "rejected"), path)


def rl_prompts(folder: Path, split: str) -> list[dict]:
    """{"prompt", "answer"} rows of train.jsonl or validation.jsonl. prep_rl's rows name their
    environment (task_name); the torch rl checks answers, so only answer-checked tasks are accepted."""
    path = folder / f"{split}.jsonl"
    rows = _need(_jsonl(path), ("prompt", "answer"), path)
    other = sorted({r["task_name"] for r in rows if r.get("task_name", "math") not in TASKS})
    if other:
        raise StageError(f"{path}: environments {', '.join(other)} have no verifier in the torch rl "
                         f"(it checks answers: {', '.join(TASKS)})")
    return rows


def base_model(config: dict, arch: dict, tokenizer):
    """The model torch pretrain starts from: base_model.hf_model_id when it is a local HF folder
    (its size must be what `arch` says, its vocabulary the tokenizer's), else a fresh one from `arch`."""
    source = (config.get("base_model") or {}).get("hf_model_id")
    folder = Path(source) if source else None
    if folder is None or not (folder / "config.json").is_file():
        return lm.build_model(arch, tokenizer)
    model = lm.load_model(folder)
    c = model.config
    have = {"hidden": c.hidden_size, "intermediate": c.intermediate_size, "layers": c.num_hidden_layers,
            "heads": c.num_attention_heads}
    problems = [f"model.{k} {arch[k]} but the base model's is {v}" for k, v in have.items() if arch.get(k) != v]
    if arch.get("max_len", 0) > c.max_position_embeddings:
        problems.append(f"model.max_len {arch['max_len']} > the base model's positions {c.max_position_embeddings}")
    if c.vocab_size != len(tokenizer):
        problems.append(f"the base model's vocabulary has {c.vocab_size} ids, the tokenizer {len(tokenizer)}")
    if problems:
        raise StageError(f"pretrain: base model {folder}: " + "; ".join(problems))
    return model
