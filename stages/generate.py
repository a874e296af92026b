"""Batched generation with the KV cache (HF `generate`), greedy or sampled, for eval and rollouts."""
from __future__ import annotations

from stages import lm


def complete(model, tokenizer, prompts: list[str], max_new_tokens: int, *, samples: int = 1,
             temperature: float = 0.0, batch_size: int = 256, seed: int = 0) -> list[list[str]]:
    """For each prompt, `samples` completions (text after the prompt, up to eos)."""
    import torch

    torch.manual_seed(seed)
    out: list[list[str]] = []
    rows = lm.encode(tokenizer, prompts, bos=True)
    greedy = temperature <= 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        ids, mask = lm.pad(chunk, tokenizer.pad_token_id, left=True)
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                do_sample=not greedy, temperature=None if greedy else temperature, top_k=None, top_p=None,
                num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id, use_cache=True,
            )
        texts = tokenizer.batch_decode(gen[:, ids.shape[1]:], skip_special_tokens=True)
        out += [texts[i * samples:(i + 1) * samples] for i in range(len(chunk))]
    return out
