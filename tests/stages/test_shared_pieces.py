"""The shared ML pieces on small hand-checked inputs (fast: no training)."""
import math
import random
from itertools import combinations
from pathlib import Path

import pytest
import torch

from jobs.context import Distributed, Requeue, StageContext
from stages import batches, tracking
from stages.eval import pass_at_k
from stages.lm import arch_problems
from stages.loop import Schedule
from stages.losses import bradley_terry_loss, causal_lm_loss
from stages.pretrain import pack


def test_schedule_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    s = Schedule(steps=110, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert [round(s.factor(i), 6) for i in range(3)] == [0.1, 0.2, 0.3]
    assert s.factor(9) == 1.0 and s.factor(10) == 1.0
    assert math.isclose(s.factor(60), 0.55)                       # halfway through the decay
    assert math.isclose(s.factor(110), 0.1)
    assert all(s.factor(i) >= s.factor(i + 1) for i in range(10, 110))


def test_schedule_reports_every_bad_knob_at_once():
    with pytest.raises(ValueError) as e:
        Schedule.from_config({"steps": 0, "warmup": 5, "min_lr_ratio": 2, "log_every": 0})
    msg = str(e.value)
    assert all(s in msg for s in ("lr is missing", "steps must be >= 1", "min_lr_ratio must be in [0, 1]",
                                  "log_every must be >= 1", "warmup must be in [0, steps)"))


def test_batches_depend_only_on_seed_and_step_and_ranks_split_the_global_batch():
    whole = batches.indices(7, 42, 1000, 8)
    assert whole == batches.indices(7, 42, 1000, 8) and whole != batches.indices(7, 43, 1000, 8)
    assert batches.indices(7, 42, 1000, 8, 0, 2) + batches.indices(7, 42, 1000, 8, 1, 2) == whole
    with pytest.raises(ValueError, match="does not split"):
        batches.indices(7, 42, 1000, 8, 0, 3)
    rows = [[1] * random.Random(i).randint(3, 6) for i in range(100)]
    groups = batches.by_length(rows)
    picked = batches.bucketed(7, 5, groups, 16)
    assert len({len(rows[i]) for i in picked}) == 1                # one length: no padding
    assert batches.bucketed(7, 5, groups, 16, 1, 2) == picked[8:]


def test_pack_keeps_every_token_in_order_of_a_shuffle_and_cuts_full_blocks():
    rows = [[1, i, i, 2] for i in range(10, 30)]
    blocks = pack(rows, 6, seed=3)
    assert all(len(b) == 6 for b in blocks) and len(blocks) == 80 // 6
    order = list(range(20))
    random.Random(3).shuffle(order)
    stream = [t for i in order for t in rows[i]]
    assert [t for b in blocks for t in b] == stream[:78]          # the last 2 tokens do not fill a block
    assert pack(rows, 6, seed=3) == blocks and pack(rows, 6, seed=4) != blocks


def test_pass_at_k_matches_the_combinatorial_definition():
    for n, c, k in [(8, 0, 1), (8, 3, 1), (8, 3, 4), (8, 7, 4), (8, 8, 8), (5, 2, 3)]:
        draws = list(combinations(range(n), k))
        exact = sum(any(i < c for i in d) for d in draws) / len(draws)   # the first c samples are right
        assert math.isclose(pass_at_k(n, c, k), exact), (n, c, k)
    assert pass_at_k(8, 3, 1) == 3 / 8


def test_masked_lm_loss_counts_only_masked_positions_and_data_parallel_shares_add_up():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 5)

    class Toy(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": emb(input_ids)})

    ids = torch.tensor([[1, 2, 3, 4], [4, 3, 2, 1]])
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    full = causal_lm_loss(Toy(), ids, None, mask)
    nll = torch.nn.functional.cross_entropy(emb(ids)[:, :-1].reshape(-1, 5), ids[:, 1:].reshape(-1), reduction="none")
    assert torch.isclose(full, (nll * mask[:, 1:].reshape(-1)).sum() / 5)
    # two "ranks", one row each, normalised by the global token count / world: their mean is the whole
    halves = [causal_lm_loss(Toy(), ids[i:i + 1], None, mask[i:i + 1], tokens=5 / 2) for i in (0, 1)]
    assert torch.isclose(sum(halves) / 2, full)
    assert torch.isclose(causal_lm_loss(Toy(), ids), nll.mean())


def test_bradley_terry_is_log2_at_a_tie_and_counts_the_pairs_ranked_right():
    loss, acc = bradley_terry_loss(torch.tensor([0.0, 2.0, -1.0]), torch.tensor([0.0, 0.0, 1.0]))
    assert acc.item() == pytest.approx(1 / 3)
    assert loss.item() == pytest.approx((math.log(2) + math.log1p(math.exp(-2)) + math.log1p(math.exp(2))) / 3)


def test_model_shape_is_checked_before_anything_runs():
    ok = {"hidden": 128, "intermediate": 384, "layers": 4, "heads": 4, "max_len": 48}
    assert arch_problems(ok) == []
    assert "head_dim = hidden / heads = 16 < 32" in arch_problems({**ok, "heads": 8})[0]
    assert arch_problems({"hidden": 128}) == [f"model.{k} is missing" for k in ("intermediate", "layers", "heads", "max_len")]


def test_trackers_are_closed_on_requeue_and_tensorboard_gets_scalars(tmp_path: Path):
    ctx = StageContext(run_id="r", recipe="tiny", stage="sft", run_dir=tmp_path, inputs={},
                       config={"tracking": {"wandb": "disabled", "tensorboard": True}}, dist=Distributed())
    with pytest.raises(Requeue):
        with tracking.session(ctx) as trackers:
            ctx.log({"sft/loss": 1.5, "note": "text is skipped"}, step=3)
            ctx.requeue()
    assert [t.closed for t in trackers] == [True]
    assert ctx.links == {"tensorboard": str(tmp_path / "tensorboard")}
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    ctx.log({"sft/loss": 1.0}, step=4)                      # after close: no error, metrics.jsonl still written
    with pytest.raises(ValueError, match="tracking.wandb must be one of"):
        with tracking.session(StageContext(run_id="r", recipe="t", stage="s", run_dir=tmp_path, inputs={},
                                           config={"tracking": {"wandb": "offlin"}})):
            pass
    rank1 = StageContext(run_id="r", recipe="t", stage="s", run_dir=tmp_path / "r1", inputs={},
                         config={"tracking": {"wandb": "offline"}}, dist=Distributed(rank=1, world_size=2))
    with tracking.session(rank1) as trackers:
        assert trackers == [] and rank1.links == {}          # only rank 0 reports
