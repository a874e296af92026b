"""The RL policy trainer: one Ray actor holding the policy, its frozen reference and the optimizer.

The driver (stages/rl.py) hands it scored rollouts; it takes one optimizer step per batch
(on-policy), writes the weights the rollout workers refit from, and checkpoints itself. Sequences
are <bos> prompt response, right-padded; the loss mask is 1 on response tokens (the <eos> included).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def pack(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """(ids, attention mask, response mask aligned with ids[:, 1:]) for prompt+response rows."""
    import torch

    from stages.ml import lm

    rows = [p + r for p, r in zip(prompts, responses)]
    ids, attn = lm.pad(rows, pad_id)
    resp = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        resp[i, len(p):len(p) + len(r)] = 1
    return ids, attn, resp[:, 1:]


def pack_shared(prompts: list[list[int]], responses: list[list[int]], pad_id: int, max_width: int = 512) -> dict:
    """The same rows with each prompt once: a run of consecutive rows with the same prompt (a GRPO
    group) becomes one packed row, `<bos> prompt r_1 r_2 ... r_G`, where r_j sees the prompt and its
    own earlier tokens only (a 4-D mask) and sits at the positions it has in its own row. The prompt's
    keys and values are computed once per group instead of G times.

    Returns ids, position_ids, mask (additive, (rows, 1, width, width)), and per sample the flat
    index of the logit that predicts each response token (`source`), the token (`target`) and a 1/0
    `valid`, all (samples, longest response): response-aligned, unlike `pack`'s sequence-aligned mask.
    A group longer than `max_width` tokens is cut into rows that each repeat the prompt (the mask is
    width x width per row).
    """
    import torch

    runs: list[tuple[list[int], list[int]]] = []          # (prompt, sample indices)
    used = 0
    for i, p in enumerate(prompts):
        if runs and runs[-1][0] == p and used + len(responses[i]) <= max_width:
            runs[-1][1].append(i)
        else:
            runs.append((p, [i]))
            used = len(p)
        used += len(responses[i])
    width = max(len(p) + sum(len(responses[i]) for i in idx) for p, idx in runs)
    longest = max(1, max(len(r) for r in responses))
    ids, pos, seg = [], [], []          # seg: 0 prompt, j + 1 response j, -1 padding
    source, target, valid = [[0] * longest for _ in prompts], [[pad_id] * longest for _ in prompts], \
        [[0] * longest for _ in prompts]
    for row, (p, idx) in enumerate(runs):
        n = len(p)
        r_ids, r_pos, r_seg = list(p), list(range(n)), [0] * n
        for j, i in enumerate(idx):
            r = responses[i]
            k, at = len(r), row * width + len(r_ids)
            if not k:
                continue
            r_ids += r
            r_pos += range(n, n + k)
            r_seg += [j + 1] * k
            # r[0] is predicted by the prompt's last token, r[t] by r[t - 1] (flat logit indices)
            source[i][:k] = [row * width + n - 1, *range(at, at + k - 1)]
            target[i][:k] = r
            valid[i][:k] = [1] * k
        fill = width - len(r_ids)
        ids.append(r_ids + [pad_id] * fill)
        pos.append(r_pos + [0] * fill)
        seg.append(r_seg + [-1] * fill)
    ids, pos, seg, source, target, valid = (torch.tensor(x, dtype=torch.long)
                                            for x in (ids, pos, seg, source, target, valid))
    q, k = seg[:, :, None], seg[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = causal & (k >= 0) & ((k == 0) | (k == q))
    allowed |= torch.eye(width, dtype=torch.bool)              # padding sees itself: no empty softmax row
    mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return {"ids": ids, "position_ids": pos, "mask": mask[:, None], "source": source, "target": target,
            "valid": valid}


class PolicyTrainer:
    """`ray.remote(PolicyTrainer)`: GRPO or DPO steps on the policy, AdamW with warmup + cosine.

    On `device` cuda the policy and its reference live on the GPU and their forward passes run
    under bf16 autocast (lm.autocast), as the shared training loop's; on cpu, in float32."""

    def __init__(self, model_dir: str, cfg: dict[str, Any], seed: int, steps: int, threads: int | None = None,
                 device: str = "cpu"):
        import torch

        from stages.ml import lm
        from stages.ml.loop import Schedule

        lm.setup_torch(seed, device=device)
        if threads:
            torch.set_num_threads(threads)
        self.cfg, self.device = cfg, device
        self.policy = lm.load_model(Path(model_dir))
        self.tokenizer = lm.load_tokenizer(Path(model_dir))
        self.reference = None
        if self._kl_or_beta() > 0:
            self.reference = lm.load_model(Path(model_dir)).eval().requires_grad_(False)
        if device != "cpu":
            self.policy.to(device)
            if self.reference is not None:
                self.reference.to(device)
        p = cfg["policy"]
        lr = cfg["dpo"]["lr"] if cfg["algorithm"] == "dpo" else p["lr"]
        self.schedule = Schedule(steps=steps, lr=lr, warmup=p["warmup"], min_lr_ratio=p["min_lr_ratio"],
                                 weight_decay=p["weight_decay"], grad_clip=p["max_grad_norm"])
        params = [q for q in self.policy.parameters() if q.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=p["weight_decay"])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.schedule.factor)
        self.policy.train()

    def _kl_or_beta(self) -> float:
        if self.cfg["algorithm"] == "dpo":
            return 1.0  # DPO always needs the reference log-probs
        return float(self.cfg["loss_fn"]["reference_policy_kl_penalty"])

    # ---- steps ----------------------------------------------------------------------------------

    def grpo_step(self, prompts: list[list[int]], responses: list[list[int]], advantages: list[float]) -> dict:
        """One clipped policy-gradient step on a rollout batch (flat, prompt-major)."""
        import torch

        from stages.ml.lm import autocast
        from stages.ml.losses import grpo_loss, k3_kl, packed_token_logps

        # A group's samples share their prompt: packed, its keys and values are computed once per
        # group, not once per sample (the same log-probs as `pack`'s rows: test_rl_packing.py).
        packed = pack_shared(prompts, responses, self.tokenizer.pad_token_id)
        if self.device != "cpu":
            packed = {k: v.to(self.device) for k, v in packed.items()}
        mask = packed["valid"]
        adv = torch.tensor(advantages, dtype=torch.float32, device=self.device)
        lf, temperature = self.cfg["loss_fn"], self.cfg["generation"]["temperature"]
        with autocast(self.device):
            logp = packed_token_logps(self.policy, packed, temperature)
        # On-policy: the rollouts came from exactly these weights, so the old log-probs are these.
        old = logp.detach()
        if self.reference is not None:
            with torch.no_grad(), autocast(self.device):
                ref = packed_token_logps(self.reference, packed, temperature)
        else:
            ref = old
        loss = grpo_loss(logp, old, ref, adv, mask, clip_low=lf["ratio_clip_min"], clip_high=lf["ratio_clip_max"],
                         kl_coef=lf["reference_policy_kl_penalty"])
        m = mask.float()
        kl = (k3_kl(logp.detach(), ref) * m).sum() / m.sum()
        return {**self._update(loss), "kl": kl.item(), "response_tokens": int(m.sum().item())}

    def dpo_step(self, prompts: list[list[int]], chosen: list[list[int]], rejected: list[list[int]]) -> dict:
        """One DPO step on preference pairs (response token ids, <eos> included)."""
        import torch

        from stages.ml.lm import autocast
        from stages.ml.losses import dpo_loss, token_logps

        d = self.cfg["dpo"]
        n = len(prompts)
        ids, attn, mask = (x.to(self.device) for x in pack(prompts + prompts, chosen + rejected, self.tokenizer.pad_token_id))
        m = mask.float()
        with autocast(self.device):
            seq = (token_logps(self.policy, ids, attn) * m).sum(-1)
        with torch.no_grad(), autocast(self.device):
            ref = (token_logps(self.reference, ids, attn) * m).sum(-1)
        chosen_nll = -seq[:n] / m[:n].sum(-1)   # per-token NLL of each chosen response
        loss = dpo_loss(seq[:n], seq[n:], ref[:n], ref[n:], beta=d["beta"], sft_weight=d["sft_loss_weight"],
                        chosen_nll=chosen_nll)
        margin = ((seq[:n] - ref[:n]) - (seq[n:] - ref[n:])).detach()
        return {**self._update(loss), "reward_margin": (d["beta"] * margin).mean().item(),
                "reward_accuracy": (margin > 0).float().mean().item()}

    def _update(self, loss) -> dict:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.schedule.grad_clip)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        return {"loss": loss.item(), "grad_norm": grad_norm.item(), "lr_now": lr}   # the schedule's, this step

    # ---- weights and checkpoints -----------------------------------------------------------------

    def save_weights(self, folder: str) -> str:
        """The policy as a HF folder (what rollout workers refit from, and the stage's output)."""
        from stages.ml import lm

        lm.save_model(self.policy, self.tokenizer, Path(folder))
        return folder

    def refit_weights(self, folder: str) -> str:
        """`save_weights` for the rollout workers' refit, which read only model.safetensors: after the
        first, whole folder, a refit rewrites just that file (atomically; tied lm_head left out, as
        `save_pretrained` does)."""
        from safetensors.torch import save

        from lineage.records import atomic_write

        if not (Path(folder) / "config.json").is_file():
            return self.save_weights(folder)
        tied = self.policy.config.tie_word_embeddings
        state = {k: v.detach().cpu().contiguous() for k, v in self.policy.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        atomic_write(Path(folder) / "model.safetensors", save(state, metadata={"format": "pt"}), mode=0o644)
        return folder

    def save_checkpoint(self, path: str, step: int, identity: dict, config: dict) -> None:
        """Trainer state + step, with who wrote it (ctx.identity(): run ID, config digest, inputs)."""
        import torch

        from lineage.records import atomic_write
        from stages.ml.loop import _rng_state

        buf = io.BytesIO()
        torch.save({**identity, "step": step, "model": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "rng": _rng_state(self.device), "config": config}, buf)
        atomic_write(Path(path), buf.getvalue())

    def load_checkpoint(self, path: str, identity: dict) -> int | str:
        """Restore a checkpoint of this run, config and inputs; returns its step, or (a refusal does
        not cross Ray as a traceback) the one-line reason it was refused."""
        from stages.ml.loop import ResumeRefused, _set_rng_state, read_checkpoint

        try:
            state = read_checkpoint(Path(path), identity, self.schedule.steps)
        except ResumeRefused as e:
            return str(e)
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"])
        return state["step"]
