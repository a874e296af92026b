"""Batched generation with the KV cache (HF `generate`), greedy or sampled, for eval and rollouts."""
from __future__ import annotations

from stages import lm


def generate_ids(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, *, samples: int = 1,
                 temperature: float = 0.0, top_p: float = 1.0, batch_size: int = 256,
                 seed: int = 0) -> list[list[list[int]]]:
    """Per prompt (token ids), `samples` responses as token ids, cut after the first <eos> (kept).
    top_p < 1 samples from the smallest set of tokens whose probability reaches top_p (nucleus)."""
    import torch

    torch.manual_seed(seed)
    eos, greedy = tokenizer.eos_token_id, temperature <= 0
    out: list[list[list[int]]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        ids, mask = lm.pad(chunk, tokenizer.pad_token_id, left=True)
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                do_sample=not greedy, temperature=None if greedy else temperature, top_k=None,
                top_p=None if greedy or top_p >= 1 else top_p,
                num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos, use_cache=True,
            )
        responses = []
        for row in gen[:, ids.shape[1]:].tolist():
            responses.append(row[:row.index(eos) + 1] if eos in row else row)
        out += [responses[i * samples:(i + 1) * samples] for i in range(len(chunk))]
    return out


def complete(model, tokenizer, prompts: list[str], max_new_tokens: int, *, samples: int = 1,
             temperature: float = 0.0, batch_size: int = 256, seed: int = 0) -> list[list[str]]:
    """For each prompt, `samples` completions (text after the prompt, up to eos)."""
    ids = generate_ids(model, tokenizer, lm.encode(tokenizer, prompts, bos=True), max_new_tokens,
                       samples=samples, temperature=temperature, batch_size=batch_size, seed=seed)
    return [tokenizer.batch_decode(group, skip_special_tokens=True) for group in ids]
