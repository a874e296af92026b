"""Reward model: Bradley-Terry on preference pairs, a scalar head on the SFT model.

Inputs:  model (model: the SFT causal LM folder)
         data  (pref-data: train.jsonl of {"prompt", "chosen", "rejected"})
Outputs: reward_model (reward-model: the fine-tuned LM in HF format + reward_head.safetensors;
                       `load_reward_model(folder)` gives the scorer a later stage (RL) uses)
Launch:  jobs submit tiny --stage rm [rm.steps=600 rm.loglik=false; rm.steps=0: the initialisation alone]
Backend: `rm.backend: torch` trains here on CPU; `nemo_rl` (nano3) runs NeMo RL's run_rm.py in its
         container (stages/backends/nemo_rl.py).

    reward(prompt, response) = head(h_last) [+ alpha * log p(response.strip() <eos> | prompt)]

The head reads the last layer's hidden state at the final <eos> of the response as written. With
`rm.loglik: true` the log-likelihood of the answer under the (trained) LM is added with a learned
weight alpha (starting at 1, the head fitted on the frozen SFT features next to it): training
starts from what the SFT model already knows and Bradley-Terry adjusts all of it. The likelihood
is taken of the response without surrounding whitespace: the answer, not its form, which is the
head's to read. Taken as written, the house style's space (which SFT never saw) cost ~34 nats, the
head grew to cancel it, and a head that large rated text unlike any pair arbitrarily: seed 42's
scored a bare "1" above the right sum for 94% of prompts, and GRPO on it answered "1".

Held-out pairs are never trained on: `rm.held_out: validation` takes the data's validation.jsonl
(tiny's are built on the dev split's operand pairs, none of which a training pair shares), a share
in (0, 1) the last share of train.jsonl. On them the stage reports the trained reward's preference
accuracy (rm/held_out_accuracy) next to the baselines it has to beat, all read the way the model
reads a response (metrics.jsonl: the baselines at step 0, all side by side at the last step;
held_out.jsonl: the margins pair by pair):
    rm/init_accuracy         the reward model before its first step: the fitted head plus the
                             likelihood term (`rm.steps=0` saves exactly this model). What training adds.
    rm/sft_loglik_accuracy   the SFT model's log-likelihood of the stripped response (sum over the
                             answer and <eos>; rm/sft_mean_loglik_accuracy: the per-token mean)
    rm/frozen_head_accuracy  the head alone, fitted on the frozen SFT features (no likelihood term)
A pair whose margin is exactly 0 (the likelihood of " 68" vs "68", both read as "68") counts as half
right: a tie is a coin flip, not a loss. Rows with a "kind" (tiny's "sum" and "style" pairs) also get
each accuracy per kind.
"""
from __future__ import annotations

from pathlib import Path

from lineage.records import strict_json
from stages.ml import batches, formats, lm, tracking
from stages.ml.loop import Schedule, train
from stages.ml.losses import bradley_terry_loss
from stages.contract import StageError

#: The metrics `jobs submit` prints when the stage ends (its result).
HEADLINE = ("rm/held_out_accuracy", "rm/loss")
HEAD_FILE = "reward_head.safetensors"


def reward_model_class():
    import torch
    import torch.nn.functional as F

    class RewardModel(torch.nn.Module):
        def __init__(self, causal_lm, loglik: bool):
            super().__init__()
            self.lm = causal_lm
            self.head = torch.nn.Linear(causal_lm.config.hidden_size, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)
            self.alpha = torch.nn.Parameter(torch.ones(()), requires_grad=loglik)
            self.loglik = loglik

        def features(self, batch, stripped=None):
            """(last hidden state at <eos>, log-likelihood of the stripped response and <eos>):
            (n, hidden), (n,). `batch` and `stripped` as `inputs()` makes them."""
            ids, attention_mask, response_mask = batch
            out = self.lm(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True)
            last = attention_mask.sum(-1) - 1
            h = out.hidden_states[-1][torch.arange(ids.size(0)), last]
            loglik = self._loglik(out.logits, ids, response_mask)
            if stripped is not None:  # the rows whose response had whitespace around it, again without
                rows, (ids, attention_mask, response_mask) = stripped
                again = self._loglik(self.lm(input_ids=ids, attention_mask=attention_mask).logits, ids, response_mask)
                loglik = loglik.index_put((rows,), again)
            return h, loglik

        @staticmethod
        def _loglik(logits, ids, response_mask):
            logp = F.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            return (logp * response_mask[:, 1:]).sum(-1)

        def parts(self, batch, stripped=None):
            """(head term, log-likelihood term), each (n,)."""
            h, loglik = self.features(batch, stripped)
            return self.head(h).squeeze(-1), loglik

        def forward(self, batch, stripped=None):
            head, loglik = self.parts(batch, stripped)
            return head + self.alpha * loglik if self.loglik else head

    return RewardModel


def encode(tokenizer, prompts: list[str], responses: list[str]):
    """Rows <bos> prompt response <eos>, and masks that are 1 on response and <eos>."""
    p = lm.encode(tokenizer, prompts, bos=True)
    r = lm.encode(tokenizer, responses, bos=False, eos=True)
    return [a + b for a, b in zip(p, r)], [[0] * len(a) + [1] * len(b) for a, b in zip(p, r)]


def _batch(tokenizer, rows, masks):
    ids, attn = lm.pad(rows, tokenizer.pad_token_id)
    resp, _ = lm.pad(masks, 0)
    return ids, attn, resp


def inputs(tokenizer, prompts: list[str], responses: list[str]):
    """The model's inputs: (ids, attention mask, response mask) of the responses as written, and
    (row numbers, the same of those rows stripped) for the responses with whitespace around them,
    whose likelihood term is taken again without it (None: there are none)."""
    import torch

    batch = _batch(tokenizer, *encode(tokenizer, prompts, responses))
    rows = [i for i, r in enumerate(responses) if r != r.strip()]
    if not rows:
        return batch, None
    return batch, (torch.tensor(rows), _batch(tokenizer, *encode(tokenizer, [prompts[i] for i in rows],
                                                                  [responses[i].strip() for i in rows])))


def score(model, tokenizer, prompts: list[str], responses: list[str]):
    """The rewards of (prompt, response) pairs, (n,)."""
    return model(*inputs(tokenizer, prompts, responses))


def load_reward_model(path: Path):
    """The reward model a later stage (RL) scores with, in eval mode."""
    from safetensors.torch import load_file

    state = load_file(str(path / HEAD_FILE))
    model = reward_model_class()(lm.load_model(path), loglik=bool(state["loglik"].item()))
    model.head.load_state_dict({"weight": state["head.weight"], "bias": state["head.bias"]})
    model.alpha.data.copy_(state["alpha"])
    return model.eval()


def _measure(model, tokenizer, pairs: list[dict], batch: int = 256) -> dict:
    """For chosen and for rejected (keys "c", "r"): hidden features, head term, log-likelihood of
    the stripped response and its length in tokens (<eos> included), batch by batch, without gradients."""
    import torch

    out: dict = {}
    with torch.no_grad():
        for side, key in (("c", "chosen"), ("r", "rejected")):
            parts = []
            for i in range(0, len(pairs), batch):
                chunk = pairs[i:i + batch]
                written, stripped = inputs(tokenizer, [p["prompt"] for p in chunk], [p[key] for p in chunk])
                h, loglik = model.features(written, stripped)
                said = [p[key].strip() for p in chunk]
                length = torch.tensor([len(x) for x in lm.encode(tokenizer, said, bos=False, eos=True)], dtype=torch.float)
                parts.append((h, model.head(h).squeeze(-1), loglik, length))
            out[side] = [torch.cat(x) for x in zip(*parts)]
    return out


def held_out_margins(model, tokenizer, pairs: list[dict]) -> dict:
    """Per pair, score(chosen) - score(rejected) for: the reward, its head term alone, its
    log-likelihood alone (sum) and that log-likelihood per token; (n,) tensors."""
    import torch

    m = _measure(model, tokenizer, pairs)
    (_, headc, lc, nc), (_, headr, lr, nr) = m["c"], m["r"]
    reward = (headc + model.alpha * lc) - (headr + model.alpha * lr) if model.loglik else headc - headr
    # The same stripped answer has the same likelihood: an exact tie (the two sides' batches differ in
    # padding, which moves the float sums by ~1e-6 and would give the tie a random sign).
    same = torch.tensor([p["chosen"].strip() == p["rejected"].strip() for p in pairs])
    loglik, mean_loglik = (torch.where(same, 0.0, x) for x in (lc - lr, lc / nc - lr / nr))
    return {"reward": reward, "head": headc - headr, "loglik": loglik, "mean_loglik": mean_loglik}


FIT_STEPS, FIT_LR = 300, 0.05   # full-batch Adam over all training pairs (one linear map)


def fit_head(features_c, features_r, offset=None):
    """Head weights fitted by Bradley-Terry on frozen features (bias 0: it cancels in a difference);
    `offset`, per pair, is a fixed part of the margin (the likelihood term)."""
    import torch

    diff = features_c - features_r
    w = torch.zeros(diff.size(1), requires_grad=True)
    opt = torch.optim.Adam([w], lr=FIT_LR)
    for _ in range(FIT_STEPS):
        opt.zero_grad()
        loss, _ = bradley_terry_loss(diff @ w + (0 if offset is None else offset), torch.zeros(()))
        loss.backward()
        opt.step()
    return w.detach()


def _accuracies(margins: dict, pairs: list[dict]) -> dict[str, float]:
    """rm/<name>: the share of positive margins, a tie counting half; rm/<kind>/<name> for each kind
    the rows name."""
    kinds = sorted({p["kind"] for p in pairs if isinstance(p.get("kind"), str)})
    out = {}
    for name, m in margins.items():
        right = (m > 0).float() + 0.5 * (m == 0).float()
        out[f"rm/{name}"] = right.mean().item()
        for kind in kinds:
            picked = [i for i, p in enumerate(pairs) if p.get("kind") == kind]
            out[f"rm/{kind}/{name}"] = right[picked].mean().item()
    return out


def held_out_split(cfg: dict, data: Path) -> tuple[list[dict], list[dict]]:
    """(training pairs, held-out pairs) as `rm.held_out` says."""
    pairs = formats.preference_pairs(data)
    if cfg["held_out"] == "validation":
        return pairs, formats.preference_pairs(data, "validation")
    cut = int(len(pairs) * (1 - cfg["held_out"]))
    return pairs[:cut], pairs[cut:]


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `rm:` section before submit; `backend: nemo_rl` renders NeMo RL's
    reward-model config and checks it against the image's NeMo RL (stages/backends/nemo_rl.py)."""
    cfg = config.get("rm")
    if not isinstance(cfg, dict):
        return ["the config has no rm: section"]
    backend = cfg.get("backend", "torch")
    if backend == "nemo_rl":
        from stages.backends import nemo_rl

        return nemo_rl.check_config(config, "rm", resources)
    if backend != "torch":
        return [f"rm.backend must be torch or nemo_rl (got {backend!r})"]
    from stages.schema import Float, Int, Map, check

    held_out = cfg.get("held_out")
    schema = {"batch_size": Int(1, 1 << 20), "steps": Int(0, 10**9), "lr": Float(0, 1, open_lo=True)}
    if isinstance(held_out, str):
        problems = [] if held_out == "validation" else [
            f"rm.held_out must be validation (the data's validation.jsonl) or a share in (0, 1) (got {held_out!r})"]
    else:
        schema["held_out"] = Float(0, 1, open_lo=True, open_hi=True)
        problems = []
    problems += check(cfg, Map(schema, extra=True), "rm")
    if problems:
        return problems
    # steps 0: the initialisation alone, no training schedule to check
    return Schedule.problems(cfg, "rm") if cfg["steps"] else []


def notes(config: dict) -> list[str]:
    """What submit says of the torch schedule: a warmup not below a short run's steps is shortened."""
    return Schedule.notes(config["rm"], "rm") if config.get("rm", {}).get("backend", "torch") == "torch" and config["rm"].get("steps") else []

def preview(config: dict, resources: dict) -> str | None:
    """For `jobs submit --dry-run`: the NeMo RL reward-model config and command a nemo_rl job runs."""
    if config["rm"].get("backend") != "nemo_rl":
        return None
    from stages.backends import nemo_rl

    return nemo_rl.preview(config, resources, "rm")


def gate(ctx, produced: dict[str, Path]) -> list:
    """What a finished rm must show (stages/gate.py): the steps asked for (0: none), a finite loss
    and held-out accuracy, the reward model loading with its head. NeMo RL's by its folder alone."""
    from stages import gate as g

    cfg, folder = ctx.config["rm"], produced["reward_model"]
    if cfg.get("backend", "torch") == "nemo_rl":
        return [g.model_loads(folder, "reward_model", whole=False)]
    head = folder / HEAD_FILE
    return [g.steps_trained(ctx, "rm/loss", cfg["steps"]), g.losses_finite(ctx, "rm/loss"),
            g.losses_finite(ctx, "rm/held_out_accuracy", "accuracy"),
            g.model_loads(folder, "reward_model") if head.is_file() else g.Check("loads", False, f"reward_model has no {HEAD_FILE}")]


def run(ctx) -> dict[str, Path]:
    from safetensors.torch import save_file
    import torch

    cfg = ctx.section("rm")
    if cfg.get("backend", "torch") == "nemo_rl":
        from stages.backends import nemo_rl

        return nemo_rl.run_stage(ctx, "rm")
    # Fail fast: what submit checked (a context built elsewhere was not), and what needs the allocation.
    problems = check_config(ctx.config)
    if cfg.get("batch_size", 0) % ctx.dist.world_size:
        problems.append(f"rm.batch_size {cfg.get('batch_size')} does not split over {ctx.dist.world_size} ranks")
    if problems:
        raise StageError("rm: " + "; ".join(problems))
    schedule = Schedule.from_config(cfg) if cfg["steps"] else None   # 0: the initialisation alone
    seed = ctx.config["seed"]
    lm.setup_torch(seed, ctx.dist, cpus=ctx.resources.cpus_per_task)

    # Setup: SFT model + zero head; pairs split into train and a held-out tail.
    with ctx.timed("load"):
        tokenizer = lm.load_tokenizer(ctx.input("model"))
        model = reward_model_class()(lm.load_model(ctx.input("model")), loglik=bool(cfg.get("loglik", True)))
    train_pairs, test_pairs = held_out_split(cfg, ctx.input("data"))

    def loss_fn(m, step, rank, world):
        picked = [train_pairs[i] for i in batches.indices(seed, step, len(train_pairs), cfg["batch_size"], rank, world)]
        scores = score(m, tokenizer, [p["prompt"] for p in picked] * 2,
                       [p["chosen"] for p in picked] + [p["rejected"] for p in picked])
        loss, acc = bradley_terry_loss(scores[:len(picked)], scores[len(picked):])
        return loss, {"train_accuracy": acc.item()}

    # Baselines on the SFT model as it comes; train; measure the reward on the same held-out pairs.
    with tracking.session(ctx):
        model.eval()
        fit, test = _measure(model, tokenizer, train_pairs), _measure(model, tokenizer, test_pairs)
        alone = fit_head(fit["c"][0], fit["r"][0])
        # The head starts fitted to the frozen SFT features next to the likelihood: from a zero head,
        # lr 1e-4 bent the LM to do the head's work ("sum" pairs fell from 0.97 to 0.70 held-out).
        model.head.weight.data.copy_(fit_head(fit["c"][0], fit["r"][0], fit["c"][2] - fit["r"][2]) if model.loglik
                                     else alone)
        before = held_out_margins(model, tokenizer, test_pairs)
        baselines = {"init_accuracy": before["reward"], "sft_loglik_accuracy": before["loglik"],
                     "sft_mean_loglik_accuracy": before["mean_loglik"],
                     "frozen_head_accuracy": (test["c"][0] - test["r"][0]) @ alone}
        ctx.log({"rm/held_out_pairs": len(test_pairs), "rm/train_pairs": len(train_pairs),
                 **_accuracies(baselines, test_pairs)}, step=0)
        if schedule is not None:
            model = train(ctx, model, schedule, loss_fn, "rm")
        after = held_out_margins(model, tokenizer, test_pairs)
        margins = {"held_out_accuracy": after["reward"], **baselines, "held_out_head_only_accuracy": after["head"]}
        ctx.log({**_accuracies(margins, test_pairs), "rm/alpha": model.alpha.item()}, step=cfg["steps"])

    # Output (rank 0): the LM folder + the head; the held-out margins pair by pair next to the metrics.
    if not ctx.dist.is_main:
        return {}
    (ctx.run_dir / "held_out.jsonl").write_text("".join(strict_json(
        {**p, **{k.removesuffix("_accuracy"): round(v[i].item(), 4) for k, v in margins.items()}}, sort_keys=True) + "\n"
        for i, p in enumerate(test_pairs)))
    with ctx.timed("save"):
        out = lm.save_model(model.lm, tokenizer, ctx.output_dir("reward_model"))
        save_file({"head.weight": model.head.weight.detach().contiguous(), "head.bias": model.head.bias.detach().contiguous(),
                   "alpha": model.alpha.detach().reshape(()), "loglik": torch.tensor(int(model.loglik))},
                  str(out / HEAD_FILE))
    return {"reward_model": out}
