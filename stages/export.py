"""Export: a Hugging Face folder that plain `transformers` loads and generates with.

Inputs:  model (model: a causal LM folder; sft's by default, rl's once that stage exists)
Outputs: hf    (hf-model: config.json, model.safetensors, generation_config.json, tokenizer.json +
                tokenizer_config.json, README.md)
Launch:  jobs submit tiny --stage export [export.dtype=bfloat16]

The folder needs no code of ours: AutoTokenizer + AutoModelForCausalLM + generate() is enough
(tests/stages/test_pipeline.py checks exactly that in a fresh interpreter). The tokenizer puts
<bos> in front of a plain call and generation stops at <eos> after at most max_new_tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages import lm

DTYPES = ("float32", "bfloat16", "float16")

USAGE = """\
# {recipe} model

Exported by `jobs` run {run_id} (stage {stage}). Load it with plain `transformers`:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
inputs = tok("23+45=", return_tensors="pt")          # the tokenizer adds <bos>
out = model.generate(**inputs)                        # greedy, stops at <eos> (generation_config.json)
print(tok.decode(out[0, inputs.input_ids.shape[1]:], skip_special_tokens=True))   # 68
```
"""


def run(ctx) -> dict[str, Path]:
    import torch

    cfg = ctx.config["export"]
    if cfg["dtype"] not in DTYPES:
        raise ValueError(f"export.dtype must be one of {', '.join(DTYPES)} (got {cfg['dtype']!r})")

    model = lm.load_model(ctx.input("model")).to(getattr(torch, cfg["dtype"]))
    tokenizer = lm.load_tokenizer(ctx.input("model"))

    tokenizer.model_max_length = model.config.max_position_embeddings
    out = lm.save_model(model, tokenizer, ctx.output_dir("hf"), max_new_tokens=cfg["max_new_tokens"])
    # The generic fast-tokenizer class name, which transformers 4.x also knows (5.x writes its new
    # TokenizersBackend name); tokenizer.json is the same either way.
    meta = json.loads((out / "tokenizer_config.json").read_text())
    meta["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(USAGE.format(recipe=ctx.recipe, run_id=ctx.run_id, stage=ctx.stage))
    return {"hf": out}
