"""prep_pretrain: tokenize the pretraining sources into Megatron indexed shards plus the blend.

Inputs: none (sources are hub ids or local folders; the tokenizer is `tokenizer.model`).
Outputs:
    blend/      <source>/train_NNNNN.{bin,idx} and <source>/valid_NNNNN.{bin,idx} (MMIDIDX, one document
                per sequence, EOS-terminated as configured); blend.json {prefix: weight} for training
                (Megatron's data_path), blend_valid.json the same for the validation split, and
                manifest.json (tokenizer, dtype, per-source documents and tokens, shards).
    tokenizer/  the exact tokenizer the shards were written with (`save_pretrained` of the one loaded).
Work: one Ray task per (source, shard), SPREAD over the allocation's nodes, at most
workers_per_node tasks per node at a time. Each task streams its slice of the source (whole files
when there are enough, else every num_shards-th row) and stops at its share of max_tokens
(weight-normalised, split evenly over shards): a hub dataset is never downloaded whole.
Launch: jobs submit nano3 --stage prep_pretrain [--executor slurm]
"""
from __future__ import annotations

import json
from pathlib import Path

from stages.schema import Bool, Float, Int, List, Map, Str, check
from stages.prep import sources as src
from stages.contract import StageError

NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
SOURCE = Map({
    "name": Str(pattern=NAME), "path": Str(empty=False), "subset": Str(required=False, null=True),
    "split": Str(required=False, null=True), "revision": Str(required=False, null=True),
    "text_field": Str(empty=False), "weight": Float(0, open_lo=True),
})
SCHEMA = Map({
    "tokenizer": Map({"model": Str(empty=False), "revision": Str(null=True), "add_bos": Bool(), "add_eos": Bool()}),
    "sources": List(SOURCE, min_len=1),
    "max_tokens": Float(0, open_lo=True),
    "num_shards": Int(1, 100_000),
    "valid_fraction": Float(0, 0.5),
    "min_doc_chars": Int(0, null=True),
    "max_doc_tokens": Int(1, null=True),
    "sample": Int(1, null=True),
    "workers_per_node": Int(1, 4096),
})


def check_config(config: dict) -> list[str]:
    cfg = config["prep_pretrain"]
    problems = check(cfg, SCHEMA, "prep_pretrain")
    if problems:
        return problems
    problems += source_problems(cfg["sources"], "prep_pretrain.sources")
    problems += tokenizer_problems(cfg["tokenizer"]["model"], "prep_pretrain.tokenizer.model")
    return problems


def source_problems(sources: list[dict], where: str, mirror: str | None = None) -> list[str]:
    """Paths that cannot be read, and names used twice (each name is a folder in the output)."""
    problems = [p for i, s in enumerate(sources) if (p := src.path_problem(s.get("path"), f"{where}[{i}].path", mirror))]
    names = [s.get("name") for s in sources]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"{where}: names {', '.join(map(str, dup))} are used twice")
    return problems


def tokenizer_problems(model: str, where: str) -> list[str]:
    if model.startswith("/") and not (Path(model) / "tokenizer_config.json").is_file():
        return [f"{where} {model} is not a tokenizer folder (no tokenizer_config.json)"]
    return []


def preview(config: dict, resources: dict) -> str:
    """The Ray work plan: tasks, concurrency, each source's token budget."""
    cfg = config["prep_pretrain"]
    nodes, shards = int(resources.get("nodes", 1)), cfg["num_shards"]
    total_w = sum(s["weight"] for s in cfg["sources"])
    lines = [f"prep_pretrain: {len(cfg['sources'])} sources x {shards} shards = {len(cfg['sources']) * shards} Ray tasks "
             f"(SPREAD), at most {cfg['workers_per_node']} per node x {nodes} nodes at once; tokenizer "
             f"{cfg['tokenizer']['model']} (revision {cfg['tokenizer']['revision']})"]
    lines += [f"  {s['name']}: {s['path']}{' / ' + s['subset'] if s.get('subset') else ''} -> "
              f"{cfg['max_tokens'] * s['weight'] / total_w:.3g} tokens (weight {s['weight'] / total_w:.3f})"
              for s in cfg["sources"]]
    return "\n".join(lines + ["writes blend/<source>/{train,valid}_NNNNN.{bin,idx}, blend.json, blend_valid.json, "
                              "manifest.json; tokenizer/"])


def gate(ctx, produced: dict[str, Path]) -> list:
    """Every shard the blends name is on disk (its .bin and .idx), and the manifest's sources hold
    training tokens."""
    from stages import gate as g

    blend = produced["blend"]
    named = [k for f in ("blend.json", "blend_valid.json") for k in json.loads((blend / f).read_text())]
    train = json.loads((blend / "blend.json").read_text())
    missing = [k for k in named if not all((blend / (k + ext)).is_file() for ext in (".bin", ".idx"))]
    manifest = json.loads((blend / "manifest.json").read_text())
    tokens = sum(s["train_tokens"] for s in manifest["sources"].values())
    return [g.Check("shards", bool(train) and not missing,
                    f"{len(named)} shard(s) named by the blends, {len(train)} for training"
                    + (f"; missing on disk: {', '.join(missing[:3])}" if missing else "")),
            g.positive("tokens", tokens, "training token(s) in manifest.json")]


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("prep_pretrain")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("prep_pretrain: " + "; ".join(problems))
    import ray
    from transformers import AutoTokenizer

    from stages.ml.indexed import dtype_for

    tok_cfg = cfg["tokenizer"]
    tok_dir, out = ctx.output_dir("tokenizer"), ctx.output_dir("blend")
    tokenizer = AutoTokenizer.from_pretrained(tok_cfg["model"], revision=tok_cfg["revision"])
    tokenizer.save_pretrained(tok_dir)             # workers load this folder: the shards match it exactly
    portable_tokenizer(tok_dir)
    if tok_cfg["add_eos"] and tokenizer.eos_token_id is None or tok_cfg["add_bos"] and tokenizer.bos_token_id is None:
        raise StageError("prep_pretrain.tokenizer: add_bos/add_eos asks for a token the tokenizer does not have")
    dtype = dtype_for(len(tokenizer))
    total_w = sum(s["weight"] for s in cfg["sources"])
    shards = cfg["num_shards"]
    opts = {k: cfg[k] for k in ("min_doc_chars", "max_doc_tokens", "valid_fraction")}
    opts.update(add_bos=tok_cfg["add_bos"], add_eos=tok_cfg["add_eos"], dtype=dtype.__name__)

    ray.init(address=ctx.ray_address, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False, configure_logging=False)
    try:
        nodes = max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
        task = ray.remote(tokenize_shard).options(num_cpus=1, scheduling_strategy="SPREAD")
        todo = [(s, i) for s in cfg["sources"] for i in range(shards)]
        limit = cfg["workers_per_node"] * nodes
        running, results = [], []
        for s, i in todo:
            if len(running) >= limit:
                done, running = ray.wait(running, num_returns=1)
                results += ray.get(done)
            source = dict(s, sample=cfg["sample"])
            budget = cfg["max_tokens"] * s["weight"] / total_w / shards
            running.append(task.remote(source, i, shards, budget, str(tok_dir), str(out), opts))
        results += ray.get(running)
    finally:
        ray.shutdown()
    return {"blend": write_blend(ctx, cfg, results, out, tokenizer, dtype), "tokenizer": tok_dir}


def portable_tokenizer(folder: Path) -> None:
    """transformers 5 saves its fast tokenizers as class "TokenizersBackend", which transformers 4
    (in Bridge 0.3.1's and NeMo RL 0.4's images) cannot load; PreTrainedTokenizerFast reads the same
    tokenizer.json in both, token for token. Its list `extra_special_tokens` is transformers 4's
    `additional_special_tokens` (4 wants a mapping under the new name)."""
    path = Path(folder) / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    before = dict(cfg)
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(cfg.get("extra_special_tokens"), list):
        cfg["additional_special_tokens"] = cfg.pop("extra_special_tokens")
    if cfg != before:
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def tokenize_shard(source: dict, index: int, shards: int, budget: float, tok_dir: str, out: str, opts: dict) -> dict:
    """One Ray task: slice `index` of `shards` of the source -> train and valid shard files."""
    import itertools

    import numpy as np
    from transformers import AutoTokenizer

    from stages.ml.indexed import IndexedWriter

    rows = src.shard(source, index, shards)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    dtype = getattr(np, opts["dtype"])
    folder = Path(out) / source["name"]
    writers = {split: IndexedWriter(folder / f"{split}_{index:05d}", dtype) for split in ("train", "valid")}
    head = [tok.bos_token_id] if opts["add_bos"] else []
    tail = [tok.eos_token_id] if opts["add_eos"] else []
    frac, used, row = opts["valid_fraction"], 0, 0
    while used < budget:
        texts = [r.get(source["text_field"]) for r in itertools.islice(rows, 512)]
        if not texts:
            break
        texts = [t for t in texts if isinstance(t, str) and t and len(t) >= (opts["min_doc_chars"] or 0)]
        for ids in tok(texts, add_special_tokens=False)["input_ids"] if texts else []:
            if used >= budget:
                break
            if opts["max_doc_tokens"]:
                ids = ids[:opts["max_doc_tokens"]]
            doc = head + ids + tail
            # Evenly spaced validation documents: exactly floor(rows * valid_fraction) of them.
            split = "valid" if int((row + 1) * frac) > int(row * frac) else "train"
            writers[split].add(doc)
            used += len(doc)
            row += 1
    stats = {}
    for split, w in writers.items():
        stats[split] = w.close()
        if not stats[split]["documents"]:
            for ext in (".bin", ".idx"):
                Path(str(w.prefix) + ext).unlink()
    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    return {"source": source["name"], "index": index, "node": node, **stats}


def write_blend(ctx, cfg: dict, results: list[dict], out: Path, tokenizer, dtype) -> Path:
    """blend.json / blend_valid.json: each shard weighted by its share of its source's tokens, so a
    source's shards together carry the source's weight. Also manifest.json and the run's metrics."""
    total_w = sum(s["weight"] for s in cfg["sources"])
    blends = {"train": {}, "valid": {}}
    per_source, metrics = {}, {}
    for s in cfg["sources"]:
        mine = sorted((r for r in results if r["source"] == s["name"]), key=lambda r: r["index"])
        info = {"path": s["path"], "weight": s["weight"] / total_w}
        for split in ("train", "valid"):
            tokens = sum(r[split]["tokens"] for r in mine)
            info[f"{split}_tokens"] = tokens
            info[f"{split}_documents"] = sum(r[split]["documents"] for r in mine)
            for r in mine:
                if r[split]["documents"]:
                    blends[split][f"{s['name']}/{split}_{r['index']:05d}"] = info["weight"] * r[split]["tokens"] / tokens
        if not info["train_tokens"]:
            raise StageError(f"prep_pretrain: source {s['name']} ({s['path']}) gave no documents "
                             f"(text_field {s['text_field']!r}, min_doc_chars {cfg['min_doc_chars']})")
        per_source[s["name"]] = info
        metrics[f"prep/tokens/{s['name']}"] = info["train_tokens"] + info["valid_tokens"]
        metrics[f"prep/train_tokens/{s['name']}"] = info["train_tokens"]
        metrics[f"prep/valid_tokens/{s['name']}"] = info["valid_tokens"]
        metrics[f"prep/documents/{s['name']}"] = info["train_documents"] + info["valid_documents"]
    metrics["prep/tokens"] = sum(v for k, v in metrics.items() if k.startswith("prep/tokens/"))
    metrics["prep/ray_nodes"] = len({r["node"] for r in results})     # nodes whose workers tokenized
    (out / "blend.json").write_text(json.dumps(blends["train"], indent=1, sort_keys=True) + "\n")
    (out / "blend_valid.json").write_text(json.dumps(blends["valid"], indent=1, sort_keys=True) + "\n")
    manifest = {
        "format": "megatron-mmididx-v1", "dtype": dtype.__name__, "vocab_size": len(tokenizer),
        "tokenizer": dict(cfg["tokenizer"], eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id),
        "split": {"train": "blend.json", "valid": "blend_valid.json"},
        "sources": per_source, "num_shards": cfg["num_shards"], "max_tokens": cfg["max_tokens"],
        "ray_nodes": metrics["prep/ray_nodes"],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    ctx.log(metrics, step=0)
    return out
