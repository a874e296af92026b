"""The GRPO step's shortcuts against the plain computations they replace, on the same model and batch:
the trainer's packed batch (each group's prompt once, stages.ml.policy.pack_shared) vs the plain rows
(every sample's row carries its prompt, stages.ml.policy.pack): the same per-token log-probs, loss and
gradients to float rounding; the rollout sampler sharing a prompt's KV cache vs HF `generate`: the
same tokens; the refit writing only model.safetensors vs the whole HF folder: the same weights."""
import pytest
import torch

from stages.ml import lm
from stages.data import _train_tokenizer
from stages.ml.losses import grpo_loss, packed_token_logps, token_logps
from stages.ml.policy import pack, pack_shared

TOL = 1e-5


def tiny(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{a}+{b}={a + b}\n" for a in range(20) for b in range(20)))
    tokenizer = lm.load_tokenizer(_train_tokenizer(tmp_path / "tok", corpus))
    torch.manual_seed(0)
    model = lm.build_model({"hidden": 64, "intermediate": 128, "layers": 2, "heads": 2, "max_len": 48}, tokenizer)
    return model, tokenizer


def batch(tokenizer):
    """Three groups of 3 with prompts of different lengths, responses of 1-4 tokens (some without
    eos: cut at max_new_tokens), and a prompt that recurs in a later, separate group."""
    prompts = lm.encode(tokenizer, ["12+7=", "3+4=", "12+7=", "15+15="], bos=True)
    texts = [["19", "1", "190"], ["7", "77", "8"], ["19", "9", "1"], ["30", "3", "300"]]
    flat_p, flat_r = [], []
    for p, group in zip(prompts, texts):
        for k, t in enumerate(lm.encode(tokenizer, group, bos=False, eos=True)):
            flat_p.append(p)
            flat_r.append(t if k else t[:-1])                   # the first of each group has no eos
    return flat_p, flat_r


@pytest.mark.parametrize("attention", ["eager", "sdpa"])   # sdpa: what lm.load_model gives the trainer
def test_packed_rows_give_the_plain_rows_log_probs_loss_and_gradients(tmp_path, attention):
    model, tokenizer = tiny(tmp_path)
    model.set_attn_implementation(attention)
    prompts, responses = batch(tokenizer)
    ids, attn, mask = pack(prompts, responses, tokenizer.pad_token_id)
    packed = pack_shared(prompts, responses, tokenizer.pad_token_id)
    assert packed["ids"].shape[0] == 4                          # one row per group, prompt once
    assert packed["ids"].numel() < ids.numel()
    assert packed["valid"].sum() == mask.sum() == sum(len(r) for r in responses)

    temperature = 1.5
    plain = token_logps(model, ids, attn, temperature)
    shared = packed_token_logps(model, packed, temperature)
    # The same tokens in the same order: row-major over samples, then response tokens.
    assert torch.equal(packed["target"][packed["valid"].bool()], ids[:, 1:][mask.bool()])
    diff = (plain[mask.bool()] - shared[packed["valid"].bool()]).abs().max().item()
    assert diff < TOL, diff
    assert (shared[~packed["valid"].bool()] == 0).all()

    # The loss with clip and KL both active, and its gradients.
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(len(prompts), generator=g)
    noise_old, noise_ref = (0.4 * torch.randn(shared.shape, generator=g) for _ in range(2))

    def aligned(noise, m):          # the same per-token perturbation in either layout
        out = torch.zeros(m.shape)
        out[m.bool()] = noise[packed["valid"].bool()]
        return out

    def loss_and_grads(logp, m, noise_old, noise_ref):
        base = logp.detach()
        loss = grpo_loss(logp, base + noise_old, base + noise_ref, adv, m, clip_low=0.2, clip_high=0.28, kl_coef=0.05)
        model.zero_grad(set_to_none=True)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    ratio = noise_old[packed["valid"].bool()].neg().exp()
    assert (ratio > 1.28).any() and (ratio < 0.8).any()
    l_plain, g_plain = loss_and_grads(token_logps(model, ids, attn, temperature), mask,
                                      aligned(noise_old, mask), aligned(noise_ref, mask))
    l_shared, g_shared = loss_and_grads(packed_token_logps(model, packed, temperature), packed["valid"],
                                        noise_old * packed["valid"], noise_ref * packed["valid"])
    assert abs(l_plain - l_shared) < TOL, (l_plain, l_shared)
    assert max((a - b).abs().max().item() for a, b in zip(g_plain, g_shared)) < TOL
    assert max(a.abs().max().item() for a in g_plain) > 1e-3      # the gradients compared are not all zero


def test_pack_shared_layout():
    packed = pack_shared([[1, 5], [1, 5], [1, 6, 7]], [[8, 2], [9], [3, 2]], pad_id=0)
    assert packed["ids"].tolist() == [[1, 5, 8, 2, 9], [1, 6, 7, 3, 2]]
    assert packed["position_ids"].tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 3, 4]]
    allowed = (packed["mask"][0, 0] == 0).int().tolist()
    assert allowed[4] == [1, 1, 0, 0, 1]                        # 9 sees the prompt and itself, not 8 2
    assert allowed[3] == [1, 1, 1, 1, 0]
    assert packed["source"].tolist() == [[1, 2], [1, 0], [5 + 2, 5 + 3]]
    assert packed["target"].tolist() == [[8, 2], [9, 0], [3, 2]]
    assert packed["valid"].tolist() == [[1, 1], [1, 0], [1, 1]]
    cut = pack_shared([[1, 5], [1, 5], [1, 5]], [[8, 2], [9], [3]], pad_id=0, max_width=5)
    assert cut["ids"].tolist() == [[1, 5, 8, 2, 9], [1, 5, 3, 0, 0]]   # a long group: two rows, the prompt in each
    assert cut["source"].tolist() == [[1, 2], [1, 0], [5 + 1, 0]]


def test_shared_prompt_sampling_draws_the_tokens_of_hf_generate(tmp_path):
    """The rollout engine's sampler (the prompt's forward pass once per group) against HF `generate`
    (the prompt repeated per sample) on the same seed: the same tokens, rows stopping at <eos> at
    different steps and others cut at max_new_tokens."""
    from stages.ml.generate import generate_ids, sample_shared

    model, tokenizer = tiny(tmp_path)
    model.eval()
    prompts = lm.encode(tokenizer, ["12+7=", "3+4=", "15+15=", "1+1="], bos=True)   # 3 lengths: left padding
    with torch.no_grad():       # make <eos> likely enough that rows finish at different steps
        h = model.model(input_ids=torch.tensor([prompts[0]])).last_hidden_state[0, -1]
        model.model.embed_tokens.weight[tokenizer.eos_token_id] += 0.3 * h / h.norm()
    for seed, temperature, chunk in ((3, 1.5, 256), (4, 1.0, 256), (5, 1.5, 3)):   # 3: two chunks, one stream
        hf = generate_ids(model, tokenizer, prompts, 6, samples=8, temperature=temperature, seed=seed, batch_size=chunk)
        ours = sample_shared(model, tokenizer, prompts, 6, samples=8, temperature=temperature, seed=seed,
                             batch_size=chunk)
        assert ours == hf, (seed, temperature, chunk)
    lengths = {len(r) for g in hf for r in g}
    ended = {r[-1] == tokenizer.eos_token_id for g in hf for r in g}
    assert len(lengths) >= 4 and ended == {True, False}, lengths
    # A minimum completion length (rl.generation.min_new_tokens): HF's min_new_tokens draws the same
    # tokens, no row ends before 4 new tokens, and rows that ended at 1-3 tokens above now run on.
    assert min(lengths) < 4
    hf = generate_ids(model, tokenizer, prompts, 6, samples=8, temperature=1.5, seed=3, min_new_tokens=4)
    ours = sample_shared(model, tokenizer, prompts, 6, samples=8, temperature=1.5, seed=3, min_new_tokens=4)
    assert ours == hf
    assert all(len(r) >= 4 and tokenizer.eos_token_id not in r[:4] for g in ours for r in g)
    assert {r[-1] == tokenizer.eos_token_id for g in ours for r in g} == {True, False}


def test_refit_writes_the_weights_save_weights_writes(tmp_path):
    from safetensors.torch import load_file

    from stages.ml.policy import PolicyTrainer
    from stages.ml.rollout import HFEngine

    model, tokenizer = tiny(tmp_path)
    lm.save_model(model, tokenizer, tmp_path / "sft")
    cfg = {"algorithm": "grpo", "generation": {"temperature": 1.5},
           "loss_fn": {"reference_policy_kl_penalty": 0.01, "ratio_clip_min": 0.2, "ratio_clip_max": 0.28},
           "policy": {"lr": 1e-3, "warmup": 0, "min_lr_ratio": 1.0, "weight_decay": 0.0, "max_grad_norm": 1.0}}
    trainer = PolicyTrainer(str(tmp_path / "sft"), cfg, seed=0, steps=10, threads=1)
    refit = tmp_path / "refit"
    trainer.refit_weights(str(refit))                  # the first: a whole HF folder, as engines load at start
    engine = HFEngine(refit, seed=0, threads=1)
    prompts, responses = batch(tokenizer)
    trainer.grpo_step(prompts, responses, [1.0, -1.0, 0.5] * 4)
    trainer.refit_weights(str(refit))                  # then only model.safetensors
    engine.load_weights(refit)
    trainer.save_weights(str(tmp_path / "whole"))
    ours, whole = load_file(str(refit / "model.safetensors")), load_file(str(tmp_path / "whole" / "model.safetensors"))
    assert ours.keys() == whole.keys() and all(torch.equal(ours[k], whole[k]) for k in ours)
    trained = trainer.policy.state_dict()
    assert not torch.equal(trained["model.norm.weight"], model.state_dict()["model.norm.weight"])  # the step moved it
    assert all(torch.equal(v, trained[k]) for k, v in engine.model.state_dict().items())
