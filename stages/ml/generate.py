"""Batched generation with the KV cache (HF `generate`), greedy or sampled, for eval and rollouts.

Runs where the model is (CPU or CUDA), in the model's float32: no autocast, the distribution the
trainer's log-probs are compared with is the full-precision one."""
from __future__ import annotations

from stages.ml import lm


def generate_ids(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, *, samples: int = 1,
                 temperature: float = 0.0, top_p: float = 1.0, batch_size: int = 256,
                 seed: int = 0, min_new_tokens: int = 0) -> list[list[list[int]]]:
    """Per prompt (token ids), `samples` responses as token ids, cut after the first <eos> (kept).
    top_p < 1 samples from the smallest set of tokens whose probability reaches top_p (nucleus).
    min_new_tokens > 0: <eos> cannot come before that many new tokens (HF's min_new_tokens)."""
    import torch

    torch.manual_seed(seed)
    eos, greedy = tokenizer.eos_token_id, temperature <= 0
    out: list[list[list[int]]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        ids, mask = lm.pad(chunk, tokenizer.pad_token_id, left=True)
        ids, mask = ids.to(model.device), mask.to(model.device)
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                do_sample=not greedy, temperature=None if greedy else temperature, top_k=None,
                top_p=None if greedy or top_p >= 1 else top_p,
                num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos, use_cache=True, **({"min_new_tokens": min_new_tokens} if min_new_tokens else {}),
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


def sample_shared(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, *, samples: int,
                  temperature: float, batch_size: int = 256, seed: int = 0,
                  min_new_tokens: int = 0) -> list[list[list[int]]]:
    """`generate_ids` sampling at `temperature` (> 0), with each prompt's forward pass run once and
    its KV cache shared by its `samples` continuations (HF `generate` repeats the prompt `samples`
    times first). The same draws from the same seed: the tokens of `generate_ids`, unless a float
    rounding difference moves a probability across a uniform draw (tests/stages/test_rl_packing.py).
    min_new_tokens: <eos> gets probability 0 for the first that many new tokens (as `generate_ids`'s)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    out: list[list[list[int]]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        ids, mask = lm.pad(chunk, pad, left=True)
        ids, mask = ids.to(model.device), mask.to(model.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            step = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            cache = step.past_key_values
            cache.batch_repeat_interleave(samples)
            logits = step.logits[:, -1].float().repeat_interleave(samples, 0)
            mask, last = mask.repeat_interleave(samples, 0), pos[:, -1].repeat_interleave(samples)
            done = torch.zeros(len(mask), dtype=torch.bool, device=mask.device)
            new = []
            for t in range(max_new_tokens):
                if t < min_new_tokens:
                    logits[:, eos] = float("-inf")
                token = torch.multinomial(F.softmax(logits / temperature, dim=-1), num_samples=1).squeeze(1)
                token = token.masked_fill(done, pad)        # a finished row only pads (as `generate`)
                new.append(token)
                done |= token == eos
                if done.all() or t + 1 == max_new_tokens:
                    break
                mask, last = torch.cat([mask, torch.ones_like(mask[:, :1])], 1), last + 1
                step = model(input_ids=token[:, None], attention_mask=mask, position_ids=last[:, None],
                             past_key_values=cache, use_cache=True)
                logits = step.logits[:, -1].float()
        responses = []
        for row in torch.stack(new, 1).tolist():
            responses.append(row[:row.index(eos) + 1] if eos in row else row)
        out += [responses[i * samples:(i + 1) * samples] for i in range(len(chunk))]
    return out
