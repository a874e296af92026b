"""Export: a Hugging Face folder that plain `transformers` loads and generates with.

Inputs:  model (a causal LM folder)
Outputs: hf (config.json, model.safetensors, generation_config.json, tokenizer files, README.md)
Launch:  jobs submit tiny --stage export
The folder needs no code of ours: AutoModelForCausalLM + AutoTokenizer + generate() is enough.
"""
from __future__ import annotations

from pathlib import Path

from stages import lm


def run(ctx) -> dict[str, Path]:
    import torch

    cfg = ctx.config["export"]
    model = lm.load_model(ctx.input("model"))
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    model = model.to(getattr(torch, cfg["dtype"]))
    out = lm.save_model(model, tokenizer, ctx.output_dir("hf"), max_new_tokens=cfg["max_new_tokens"])
    (out / "README.md").write_text(
        f"# {ctx.recipe} model\n\nExported by `jobs` run {ctx.run_id} from {ctx.input('model').name}.\n\n"
        "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(path)\nmodel = AutoModelForCausalLM.from_pretrained(path)\n"
        "ids = tok('<bos>23+45=', add_special_tokens=False, return_tensors='pt').input_ids\n"
        "print(tok.decode(model.generate(ids)[0][ids.shape[1]:], skip_special_tokens=True))\n```\n")
    return {"hf": out}
