"""Reward model: Bradley-Terry on preference pairs, built on the SFT model.

Inputs:  model (the SFT causal LM folder), data (pref-data: train.jsonl of {"prompt", "chosen", "rejected"})
Outputs: reward_model (folder: the fine-tuned LM in HF format + reward_head.safetensors)
Launch:  jobs submit tiny --stage rm [rm.steps=600]

reward(prompt, response) = head(h_eos) + alpha * log p(response | prompt)
The scalar head reads the last hidden state; the log-likelihood term starts the model from what the
SFT model already knows (alpha = 1, head = 0), and Bradley-Terry training adjusts all of it. The
last `rm.held_out` share of pairs is never trained on; preference accuracy is reported on it.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages import batches, lm, tracking
from stages.loop import Schedule, train
from stages.losses import bradley_terry_loss

HEAD_FILE = "reward_head.safetensors"


def reward_model_class():
    import torch
    import torch.nn.functional as F

    class RewardModel(torch.nn.Module):
        def __init__(self, causal_lm):
            super().__init__()
            self.lm = causal_lm
            self.head = torch.nn.Linear(causal_lm.config.hidden_size, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)
            self.alpha = torch.nn.Parameter(torch.ones(()))

        def forward(self, ids, attention_mask, response_mask):
            out = self.lm(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True)
            logp = F.log_softmax(out.logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loglik = (logp * response_mask[:, 1:]).sum(-1)
            last = attention_mask.sum(-1) - 1
            h = out.hidden_states[-1][torch.arange(ids.size(0)), last]
            return self.head(h).squeeze(-1) + self.alpha * loglik

    return RewardModel


def encode(tokenizer, prompts: list[str], responses: list[str]):
    """Rows bos + prompt + response + eos, and masks that are 1 on response and eos."""
    p = lm.encode(tokenizer, prompts, bos=True)
    r = lm.encode(tokenizer, responses, bos=False, eos=True)
    return [a + b for a, b in zip(p, r)], [[0] * len(a) + [1] * len(b) for a, b in zip(p, r)]


def score(model, tokenizer, rows: list[list[int]], masks: list[list[int]]):
    ids, attn = lm.pad(rows, tokenizer.pad_token_id)
    resp, _ = lm.pad(masks, 0)
    return model(ids, attn, resp)


def load_reward_model(path: Path):
    """The reward model a later stage (RL) scores with."""
    from safetensors.torch import load_file

    model = reward_model_class()(lm.load_model(path))
    state = load_file(str(path / HEAD_FILE))
    model.head.load_state_dict({"weight": state["head.weight"], "bias": state["head.bias"]})
    model.alpha.data.copy_(state["alpha"])
    return model.eval()


def run(ctx) -> dict[str, Path]:
    import torch
    from safetensors.torch import save_file

    cfg = ctx.config["rm"]
    lm.setup_torch(ctx.config["seed"])
    tokenizer = lm.load_tokenizer(ctx.input("model"))
    model = reward_model_class()(lm.load_model(ctx.input("model")))
    pairs = [json.loads(line) for line in (ctx.input("data") / "train.jsonl").read_text().splitlines()]
    cut = int(len(pairs) * (1 - cfg["held_out"]))
    train_pairs, test_pairs = pairs[:cut], pairs[cut:]
    chosen = encode(tokenizer, [p["prompt"] for p in train_pairs], [p["chosen"] for p in train_pairs])
    rejected = encode(tokenizer, [p["prompt"] for p in train_pairs], [p["rejected"] for p in train_pairs])
    trackers = tracking.start(ctx)

    def loss_fn(m, step, rank, world):
        picked = batches.indices(ctx.config["seed"], step, len(train_pairs), cfg["batch_size"], rank, world)
        rows = [chosen[0][i] for i in picked] + [rejected[0][i] for i in picked]
        masks = [chosen[1][i] for i in picked] + [rejected[1][i] for i in picked]
        scores = score(m, tokenizer, rows, masks)
        loss, acc = bradley_terry_loss(scores[:len(picked)], scores[len(picked):])
        return loss, {"accuracy": acc.item()}

    model = train(ctx, model, Schedule.from_config(cfg), loss_fn, "rm")
    with torch.no_grad():
        c = encode(tokenizer, [p["prompt"] for p in test_pairs], [p["chosen"] for p in test_pairs])
        r = encode(tokenizer, [p["prompt"] for p in test_pairs], [p["rejected"] for p in test_pairs])
        margin = score(model, tokenizer, *c) - score(model, tokenizer, *r)
    ctx.log({"rm/held_out_accuracy": (margin > 0).float().mean().item(), "rm/held_out_pairs": len(test_pairs),
             "rm/alpha": model.alpha.item()}, step=cfg["steps"])
    tracking.stop(trackers)
    if not ctx.dist.is_main:
        return {}
    out = lm.save_model(model.lm, tokenizer, ctx.output_dir("reward_model"))
    save_file({"head.weight": model.head.weight.detach().contiguous(), "head.bias": model.head.bias.detach().contiguous(),
               "alpha": model.alpha.detach().reshape(())}, str(out / HEAD_FILE))
    return {"reward_model": out}
