"""The RL losses on small hand-checked batches (the TRL cross-check comes with the rl stage)."""
import math

import torch

from stages.ml.losses import dpo_loss, group_advantages, grpo_loss, k3_kl


def test_leave_one_out_advantages():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])          # two prompts, groups of 3
    adv = group_advantages(r, 3, normalize=False)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))
    norm = group_advantages(r, 3)
    assert torch.allclose(norm[:3], adv[:3] / r[:3].std(), atol=1e-5) and torch.all(norm[3:] == 0)


def test_k3_is_zero_at_equality_and_positive_otherwise():
    a = torch.tensor([-1.0, -2.0, -0.5])
    assert torch.all(k3_kl(a, a) == 0)
    assert torch.all(k3_kl(a, a + torch.tensor([0.3, -0.3, 1.0])) > 0)


def test_grpo_loss_on_policy_is_minus_the_token_mean_advantage():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.2, 0.4, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    loss = grpo_loss(logp, logp, logp, adv, mask)
    assert math.isclose(loss.item(), -(2 * 2 + 3 * -1) / 5, rel_tol=1e-6)   # token-level: 5 tokens


def test_clip_higher_stops_the_gradient_past_the_upper_bound():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)  # ratios 1.5 and 0.5
    grpo_loss(logp, old, old, torch.tensor([1.0]), torch.ones(1, 2), clip_low=0.2, clip_high=0.28, kl_coef=0).backward()
    assert logp.grad[0, 0] == 0            # above 1 + 0.28 with a positive advantage: clipped
    assert logp.grad[0, 1] != 0            # below 1 - 0.2 with a positive advantage: min keeps the unclipped term


def test_dpo_loss_is_log2_at_the_reference_and_falls_as_the_margin_grows():
    z = torch.zeros(4)
    assert math.isclose(dpo_loss(z, z, z, z, beta=0.1).item(), math.log(2), rel_tol=1e-6)
    better = dpo_loss(z + 1, z - 1, z, z, beta=0.1)
    assert better.item() < math.log(2)
    with_sft = dpo_loss(z + 1, z - 1, z, z, beta=0.1, sft_weight=0.5, chosen_nll=torch.full((4,), 2.0))
    assert math.isclose(with_sft.item(), better.item() + 1.0, rel_tol=1e-6)
