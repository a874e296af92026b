"""Export: a Hugging Face folder that plain `transformers` (or vLLM) loads, checked in a fresh process.

Inputs:  model (model: a causal LM folder, HF format; rl's by default)
Outputs: hf    (hf-model: config.json, safetensors shards (+ index when more than one),
                generation_config.json, the input's tokenizer files and chat template as they were,
                README.md when model_card)
Launch:  jobs submit tiny --stage export [export.dtype=bfloat16]

A cast, a re-shard and a copy: the weights are loaded in `dtype` and written in safetensors shards
of at most `max_shard_size`; the tokenizer files are copied byte for byte (so a chat template and
the tokenizer's own special-token handling survive); generation_config.json holds the
`generation_config` section. With `verify_load`, a fresh interpreter (`python -I`: no project code
on its path) loads config, tokenizer and model from the folder; every tensor must have the input's
name and shape and the export's dtype, and the tokenizer must encode a probe text as the input's did.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from stages.schema import Bool, Float, Int, Map, Str, check
from stages.contract import StageError

DTYPES = ("float32", "bfloat16", "float16")
# Files of a model folder that export writes itself; every other file (tokenizer, chat template,
# remote modelling code) is copied as it is.
WRITTEN = ("config.json", "generation_config.json", "README.md", "model.safetensors.index.json",
           "pytorch_model.bin.index.json")
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
PROBE = "23+45= The answer is \\boxed{68}.\n"

SCHEMA = Map({
    "dtype": Str(choices=DTYPES),
    "max_shard_size": Str(pattern=r"[1-9][0-9]*(\.[0-9]+)?(KB|MB|GB|KiB|MiB|GiB)"),
    "safe_serialization": Bool(check=lambda v: None if v else
                               "must be true: transformers 5 writes only safetensors (pickled weights run code when loaded)"),
    "generation_config": Map({
        "max_new_tokens": Int(1, 10_000_000),
        "do_sample": Bool(required=False),
        "temperature": Float(0, 10, required=False),
        "top_p": Float(0, 1, open_lo=True, required=False),
        "top_k": Int(0, 1_000_000, required=False),
    }),
    "model_card": Bool(),
    "verify_load": Bool(),
})

CARD = """\
# {recipe} model

Exported by `jobs` run {run_id} (recipe {recipe}, stage {stage}), weights in {dtype}.
{lineage}
Load it with plain `transformers`:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
inputs = tok(prompt, return_tensors="pt")             # or tok.apply_chat_template(...) when it has one
out = model.generate(**inputs)                        # generation_config.json: {generation}
print(tok.decode(out[0, inputs.input_ids.shape[1]:], skip_special_tokens=True))
```

`jobs show {run_id}` and `jobs lineage` on this artifact give the whole record.
"""


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `export:` section."""
    if not isinstance(config.get("export"), dict):
        return ["the config has no export: section"]
    problems = check(config["export"], SCHEMA, "export")
    gen = config["export"].get("generation_config")
    if not problems and gen.get("do_sample") is False and ("temperature" in gen or "top_p" in gen):
        problems.append("export.generation_config: temperature/top_p need do_sample true (or leave do_sample out)")
    return problems


def _lineage(ctx) -> str:
    """Input artifact IDs, code and image from the run's record, when the run lives in a store."""
    try:
        from lineage import Store

        view = Store(ctx.run_dir.parent.parent).run(ctx.run_id)
    except Exception:  # a context outside a store (tests, a hand-made ctx): the card says less
        return ""
    spec = view.spec
    lines = [f"- input {role}: `{art}`" for role, art in sorted(view.inputs.items())]
    code = spec.code or {}
    if code.get("git_sha") or code.get("snapshot"):
        lines.append(f"- code: git {code.get('git_sha') or 'unknown'}{' (dirty)' if code.get('dirty') else ''}, "
                     f"snapshot `{code.get('snapshot')}`")
    if spec.container_image:
        lines.append(f"- image: `{spec.container_image}`")
    return "\nLineage:\n" + "\n".join(lines) + "\n" if lines else ""


def gate(ctx, produced: dict[str, Path]) -> list:
    """The exported folder loads with transformers (stages/gate.py): a small model whole, every
    tensor finite; a large one, or one whose modelling code comes with it, by config and shard headers
    (`verify_load` loads those whole, in a fresh interpreter)."""
    from stages import gate as g

    trust = bool((ctx.config.get("base_model") or {}).get("trust_remote_code", False))
    return [g.model_loads(produced["hf"], "hf", whole=not trust)]


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("export")
    problems = check_config(ctx.config)
    if problems:
        raise StageError("export: " + "; ".join(problems))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src, out = ctx.input("model"), ctx.output_dir("hf")
    trust = bool((ctx.config.get("base_model") or {}).get("trust_remote_code", False))

    # The weights, cast on load (a 30B model never exists in float32 here), re-sharded.
    model = AutoModelForCausalLM.from_pretrained(src, dtype=getattr(torch, cfg["dtype"]), trust_remote_code=trust)
    tokenizer = AutoTokenizer.from_pretrained(src, trust_remote_code=trust)
    gen = dict(cfg["generation_config"])
    gen.setdefault("do_sample", gen.get("temperature", 0) > 0)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, **gen)
    model.save_pretrained(out, max_shard_size=cfg["max_shard_size"])
    expected = {name: (list(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in model.state_dict().items()}
    max_positions = getattr(model.config, "max_position_embeddings", None)
    del model

    # The tokenizer files as they were; only its length limit and (for transformers 4.x) class name.
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in WRITTEN and not f.name.endswith(WEIGHTS):
            shutil.copyfile(f, out / f.name)
    meta_path = out / "tokenizer_config.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if max_positions and not 0 < int(meta.get("model_max_length") or 0) <= max_positions:
            meta["model_max_length"] = max_positions
        if meta.get("tokenizer_class") == "TokenizersBackend":   # transformers 5's name; 4.x knows the generic one
            meta["tokenizer_class"] = "PreTrainedTokenizerFast"
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    if cfg["model_card"]:
        (out / "README.md").write_text(CARD.format(recipe=ctx.recipe, run_id=ctx.run_id, stage=ctx.stage,
                                                   dtype=cfg["dtype"], lineage=_lineage(ctx),
                                                   generation=json.dumps(gen, sort_keys=True)))

    if cfg["verify_load"]:
        mismatches = verify_load(out, expected, tokenizer(PROBE, add_special_tokens=True)["input_ids"], trust)
        if mismatches:
            raise StageError(f"export: the folder does not load as written: {'; '.join(mismatches[:5])}"
                               + (f" (and {len(mismatches) - 5} more)" if len(mismatches) > 5 else ""))
    files = [f for f in out.iterdir() if f.name.endswith(".safetensors")]
    ctx.log({"export/tensors": len(expected), "export/shards": len(files),
             "export/bytes": sum(f.stat().st_size for f in files)}, step=0)
    return {"hf": out}


# Runs in `python -I`: only the installed libraries, never this project.
_LOADER = """
import json, sys
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
path, trust = sys.argv[1], sys.argv[2] == "1"
AutoConfig.from_pretrained(path, trust_remote_code=trust)
tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
model = AutoModelForCausalLM.from_pretrained(path, dtype="auto", trust_remote_code=trust)
tensors = {n: [list(t.shape), str(t.dtype).removeprefix("torch.")] for n, t in model.state_dict().items()}
print(json.dumps({"tensors": tensors, "probe": tok(sys.argv[3], add_special_tokens=True)["input_ids"]}))
"""


def verify_load(folder: Path, expected: dict, probe_ids: list[int], trust: bool = False) -> list[str]:
    """Load `folder` in a fresh interpreter; each difference from `expected` (name -> (shape,
    dtype)) and from the probe's token ids, one line each. [] when it loads exactly as written."""
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-I", "-c", _LOADER, str(folder), "1" if trust else "0", PROBE],
                       capture_output=True, text=True, env=env, timeout=6 * 3600)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"loading {folder} in a fresh process failed: {last}"]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    tensors = {n: tuple(v) for n, v in got["tensors"].items()}
    want = {n: (list(s), d) for n, (s, d) in expected.items()}
    problems = [f"tensor {n} is missing" for n in sorted(set(want) - set(tensors))]
    problems += [f"unexpected tensor {n}" for n in sorted(set(tensors) - set(want))]
    problems += [f"tensor {n}: {list(tensors[n][0])} {tensors[n][1]}, expected {want[n][0]} {want[n][1]}"
                 for n in sorted(set(want) & set(tensors)) if (list(tensors[n][0]), tensors[n][1]) != want[n]]
    if got["probe"] != probe_ids:
        problems.append(f"the tokenizer encodes {PROBE!r} as {got['probe']}, the input's as {probe_ids}")
    return problems
