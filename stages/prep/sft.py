"""prep_sft: chats rendered with the tokenizer's chat template in the layout Megatron-Bridge's
finetuning dataset reads, packed into bins; preference pairs in the layout NeMo RL's RM/DPO read.

Input: tokenizer (prep_pretrain.tokenizer, a HF tokenizer folder with a chat template).
Outputs:
    sft/    training.jsonl, validation.jsonl   {"input": rendered prompt, "output": rendered answer}:
              Bridge 0.3.1 FinetuningDatasetConfig(dataset_root=sft/) -> GPTSFTDataset (label_key "output").
            packed/training_<P>.npy, packed/validation_<P>.npy, packed/<P>_metadata.jsonl: Bridge's packed
              layout (np.save of [{"input_ids", "loss_mask", "seq_start_id"}], loss_mask label-aligned as
              Bridge's own packer writes it), so Bridge never packs inside the read-only artifact.
            bridge.json: the dataset_kwargs and packed_sequence_specs these files need
              (prompt_template "{input}{output}", no added BOS/EOS: the template has its own).
            manifest.json: counts, dropped rows by reason, packing efficiency.
    prefs/  train.jsonl, validation.jsonl: NeMo RL's PreferenceDataset rows {"context": messages,
              "completions": [{"rank": 0, "completion": [...]}, {"rank": 1, ...}]}, plus the same pair
              rendered through the template {"prompt", "chosen", "rejected"} for our torch rm/rl stages.
Only the last assistant turn of a chat is the answer (the loss target); earlier turns are context.
Launch: jobs submit nano3 --stage prep_sft [--input tokenizer=ART]
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

from stages.schema import Float, Int, List, Map, Str, check
from stages.prep.pretrain import NAME, source_problems
from stages.contract import StageError

SOURCE = Map({"name": Str(pattern=NAME), "path": Str(empty=False), "subset": Str(required=False, null=True),
              "split": Str(required=False, null=True), "revision": Str(required=False, null=True),
              "weight": Float(0, open_lo=True)})
PREF_SOURCE = Map({"name": Str(pattern=NAME), "path": Str(empty=False), "subset": Str(required=False, null=True),
                   "split": Str(required=False, null=True), "revision": Str(required=False, null=True),
                   "format": Str(choices=("helpsteer3", "pairs"))})
SCHEMA = Map({
    "chat_template": Str(empty=False), "messages_field": Str(empty=False), "tools_field": Str(empty=False),
    "sources": List(SOURCE, min_len=1), "pack_size": Int(16, 1 << 20),
    "packing_algorithm": Str(choices=("first_fit_shuffle", "first_fit_decreasing")),
    "overlong": Str(choices=("drop", "truncate")), "reasoning_off_fraction": Float(0, 1),
    "valid_fraction": Float(0, 0.5), "sample": Int(1, null=True), "seed": Int(0, 2**32 - 1),
    "prefs": Map({"sources": List(PREF_SOURCE), "min_strength": Int(1, 3), "max_tokens": Int(16, 1 << 20),
                  "valid_fraction": Float(0, 0.5)}),
})
THINK = re.compile(r"<think>.*?</think>", re.S)


def check_config(config: dict) -> list[str]:
    cfg = config["prep_sft"]
    problems = check(cfg, SCHEMA, "prep_sft")
    if problems:
        return problems
    problems += source_problems(cfg["sources"], "prep_sft.sources")
    problems += source_problems(cfg["prefs"]["sources"], "prep_sft.prefs.sources")
    t = cfg["chat_template"]
    if t != "tokenizer" and not (t.startswith("/") and Path(t).is_file()):
        problems.append(f"prep_sft.chat_template must be 'tokenizer' or an absolute path to a .jinja file (got {t!r})")
    return problems


def preview(config: dict, resources: dict) -> str:
    cfg = config["prep_sft"]
    return "\n".join([
        f"prep_sft: {len(cfg['sources'])} chat sources rendered with the {cfg['chat_template']!r} chat template, "
        f"packed into {cfg['pack_size']}-token bins ({cfg['packing_algorithm']}, overlong: {cfg['overlong']})",
        *(f"  {s['name']}: {s['path']}{' / ' + s['subset'] if s.get('subset') else ''} (weight {s['weight']})"
          for s in cfg["sources"]),
        f"  prefs: {', '.join(s['name'] + ' (' + s['format'] + ')' for s in cfg['prefs']['sources']) or 'none'}, "
        f"|preference| >= {cfg['prefs']['min_strength']}, <= {cfg['prefs']['max_tokens']} tokens",
        "writes sft/{training,validation}.jsonl, sft/packed/*.npy, sft/bridge.json; prefs/{train,validation}.jsonl"])


def gate(ctx, produced: dict[str, Path]) -> list:
    """Each file has the rows its manifest.json counts, and there is something to train on."""
    from stages import gate as g

    return (g.manifest_rows(produced["sft"], {"train": "training.jsonl", "validation": "validation.jsonl"}, ["train"])
            + g.manifest_rows(produced["prefs"], {"train": "train.jsonl", "validation": "validation.jsonl"}, ["train"]))


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("prep_sft")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("prep_sft: " + "; ".join(problems))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ctx.input("tokenizer"))
    if cfg["chat_template"] != "tokenizer":
        tok.chat_template = Path(cfg["chat_template"]).read_text()
    if not tok.chat_template:
        raise StageError(f"prep_sft: the tokenizer {ctx.input('tokenizer')} has no chat template "
                         "(set prep_sft.chat_template to a .jinja file)")
    rng = random.Random(cfg["seed"])
    metrics: dict[str, float] = {}
    sft_dir = write_sft(ctx.output_dir("sft"), cfg, tok, rng, metrics)
    prefs_dir = write_prefs(ctx.output_dir("prefs"), cfg, tok, rng, metrics)
    ctx.log(metrics, step=0)
    return {"sft": sft_dir, "prefs": prefs_dir}


def render(tok, messages: list[dict], tools=None) -> tuple[str, str] | None:
    """(prompt, answer): the template up to the last assistant turn (with the generation prompt),
    and the rest. None when the template is not prefix-stable (the split would be a guess)."""
    kw = {"tools": tools} if tools else {}
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True, **kw)
    full = tok.apply_chat_template(messages, tokenize=False, **kw)
    return (prompt, full[len(prompt):]) if full.startswith(prompt) else None


def _split(rows: list, fraction: float, rng: random.Random) -> tuple[list, list]:
    rows = rows[:]
    rng.shuffle(rows)
    n_valid = round(len(rows) * fraction) if len(rows) > 1 else 0
    if fraction > 0 and len(rows) > 1:
        n_valid = max(1, n_valid)
    return rows[n_valid:], rows[:n_valid]


def _weighted(rows: list, weight: float, rng: random.Random) -> list:
    """weight 1 keeps the source's natural size; 0.5 half of it; 2.5 it twice and a half."""
    whole, part = int(weight), weight - int(weight)
    return rows * whole + rng.sample(rows, round(len(rows) * part))


def write_sft(out: Path, cfg: dict, tok, rng: random.Random, metrics: dict) -> Path:
    from stages.prep import sources as src

    pack = cfg["pack_size"]
    rows, dropped = [], {"no_answer": 0, "template": 0, "overlong": 0}
    for s in cfg["sources"]:
        mine = []
        for rec in src.load(dict(s, sample=cfg["sample"])):
            msgs = [dict(m) for m in (rec.get(cfg["messages_field"]) or [])]
            if not msgs or msgs[-1].get("role") != "assistant":
                dropped["no_answer"] += 1
                continue
            if rng.random() < cfg["reasoning_off_fraction"] and THINK.search(msgs[-1]["content"] or ""):
                msgs[-1]["content"] = THINK.sub("<think></think>", msgs[-1]["content"])   # the "thinking off" mode
            parts = render(tok, msgs, rec.get(cfg["tools_field"]))
            if parts is None:
                dropped["template"] += 1
                continue
            ids = [tok(p, add_special_tokens=False)["input_ids"] for p in parts]
            if len(ids[0]) + len(ids[1]) > pack:
                if cfg["overlong"] == "drop" or len(ids[0]) >= pack:
                    dropped["overlong"] += 1
                    continue
                ids[1] = ids[1][:pack - len(ids[0])]
            mine.append({"input": parts[0], "output": parts[1], "ids": ids})
        metrics[f"prep/sft/chats/{s['name']}"] = len(mine)
        rows += _weighted(mine, s["weight"], rng)
    if not rows:
        raise StageError(f"prep_sft: no usable chat in the sources (dropped: {dropped})")
    train, valid = _split(rows, cfg["valid_fraction"], rng)
    meta = []
    (out / "packed").mkdir(exist_ok=True)
    for name, part in (("training", train), ("validation", valid)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps({"input": r["input"], "output": r["output"]}) + "\n" for r in part))
        if part:
            bins, m = pack_rows([r["ids"] for r in part], pack, cfg["packing_algorithm"], rng)
            _save_npy(out / "packed" / f"{name}_{pack}.npy", bins)
            meta.append(m)
            metrics[f"prep/sft/{name}_bins"] = len(bins)
            metrics[f"prep/sft/{name}_packing_efficiency"] = m["packing_efficiency"]
    (out / "packed" / f"{pack}_metadata.jsonl").write_text(json.dumps(meta) + "\n")
    (out / "bridge.json").write_text(json.dumps({
        "dataset_kwargs": {"prompt_template": "{input}{output}", "label_key": "output", "truncation_field": "input",
                           "add_bos": False, "add_eos": False, "answer_only_loss": True},
        "packed_sequence_specs": {"packed_sequence_size": pack, "packed_train_data_path": f"packed/training_{pack}.npy",
                                  "packed_val_data_path": f"packed/validation_{pack}.npy",
                                  "packed_metadata_path": f"packed/{pack}_metadata.jsonl"},
    }, indent=1, sort_keys=True) + "\n")
    (out / "manifest.json").write_text(json.dumps({
        "format": "megatron-bridge-finetuning-jsonl+packed-npy", "pack_size": pack, "train": len(train),
        "validation": len(valid), "dropped": dropped, "packing": meta}, indent=1, sort_keys=True) + "\n")
    metrics.update({"prep/sft/train": len(train), "prep/sft/validation": len(valid),
                    **{f"prep/sft/dropped_{k}": v for k, v in dropped.items()}})
    return out


def pack_rows(seqs: list[list[list[int]]], pack: int, algorithm: str, rng: random.Random) -> tuple[list[dict], dict]:
    """First fit over (context ids, answer ids) pairs; a bin never holds more than `pack` tokens."""
    order = list(range(len(seqs)))
    lengths = [len(c) + len(a) for c, a in seqs]
    if algorithm == "first_fit_shuffle":
        rng.shuffle(order)
    else:
        order.sort(key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        slot = next((b for b, r in enumerate(room) if r >= lengths[i]), None)
        if slot is None:
            bins.append([])
            room.append(pack)
            slot = len(bins) - 1
        bins[slot].append(i)
        room[slot] -= lengths[i]
    out = []
    for members in bins:
        ids, mask, starts = [], [], []
        for i in members:
            ctx_ids, ans = seqs[i]
            n = len(ctx_ids) + len(ans)
            starts.append(len(ids))
            ids += ctx_ids + ans
            # label-aligned: position k predicts token k+1; train where that token is part of the answer
            mask += [int(len(ctx_ids) - 1 <= k < n - 1) for k in range(n)]
        out.append({"input_ids": ids, "loss_mask": mask, "seq_start_id": starts})
    used = [pack - r for r in room]
    meta = {"dataset_max_seqlen": max(lengths), "max_samples_per_bin": max(len(b) for b in bins),
            "packing_factor": round(len(seqs) / len(bins), 2),
            "packing_efficiency": round(100 * sum(used) / (len(bins) * pack), 2), "pack_size": pack,
            "min_packed_seqlen": min(used)}
    return out, meta


def _save_npy(path: Path, bins: list[dict]) -> None:
    import numpy as np

    arr = np.empty(len(bins), dtype=object)
    arr[:] = bins
    np.save(path, arr, allow_pickle=True)


def write_prefs(out: Path, cfg: dict, tok, rng: random.Random, metrics: dict) -> Path:
    from stages.prep import sources as src

    pcfg = cfg["prefs"]
    rows, dropped = [], {"weak": 0, "too_long": 0, "template": 0}
    for s in pcfg["sources"]:
        n = 0
        for rec in src.load(dict(s, sample=cfg["sample"])):
            pair = _pair(rec, s["format"], pcfg["min_strength"])
            if pair is None:
                dropped["weak"] += 1
                continue
            context, chosen, rejected = pair
            rendered = [render(tok, context + [{"role": "assistant", "content": c}]) for c in (chosen, rejected)]
            if None in rendered or rendered[0][0] != rendered[1][0]:
                dropped["template"] += 1
                continue
            prompt_len = len(tok(rendered[0][0], add_special_tokens=False)["input_ids"])
            longest = max(len(tok(r[1], add_special_tokens=False)["input_ids"]) for r in rendered)
            if prompt_len + longest > pcfg["max_tokens"]:
                dropped["too_long"] += 1
                continue
            rows.append({"context": context,
                         "completions": [{"rank": 0, "completion": [{"role": "assistant", "content": chosen}]},
                                         {"rank": 1, "completion": [{"role": "assistant", "content": rejected}]}],
                         "prompt": rendered[0][0], "chosen": rendered[0][1], "rejected": rendered[1][1],
                         "source": s["name"]})
            n += 1
        metrics[f"prep/prefs/pairs/{s['name']}"] = n
    train, valid = _split(rows, pcfg["valid_fraction"], rng)
    for name, part in (("train", train), ("validation", valid)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (out / "manifest.json").write_text(json.dumps({
        "format": "nemo-rl-preference-jsonl", "train": len(train), "validation": len(valid), "dropped": dropped,
        "min_strength": pcfg["min_strength"], "max_tokens": pcfg["max_tokens"]}, indent=1, sort_keys=True) + "\n")
    metrics.update({"prep/prefs/train": len(train), "prep/prefs/validation": len(valid),
                    **{f"prep/prefs/dropped_{k}": v for k, v in dropped.items()}})
    return out


def _messages(x) -> list[dict]:
    return [{"role": "user", "content": x}] if isinstance(x, str) else [{"role": m["role"], "content": m["content"]} for m in x]


def _pair(rec: dict, fmt: str, min_strength: int):
    """(context messages, chosen, rejected), or None for a tie or a weaker preference than asked."""
    if fmt == "helpsteer3":
        pref = rec["overall_preference"]
        if abs(pref) < min_strength or pref == 0:
            return None
        r1, r2 = rec["response1"], rec["response2"]
        return (_messages(rec["context"]), r1, r2) if pref < 0 else (_messages(rec["context"]), r2, r1)
    if rec["chosen"] == rec["rejected"]:
        return None
    return _messages(rec["prompt"]), rec["chosen"], rec["rejected"]
