"""The shared ML pieces on small hand-checked inputs (fast: no training)."""
import math
import random
from itertools import combinations
from pathlib import Path

import pytest
import torch

from stages.contract import Distributed, Requeue, StageContext
from stages.ml import batches, tracking
from stages.eval import pass_at_k
from stages.ml.lm import arch_problems
from stages.ml.loop import Schedule
from stages.ml.losses import bradley_terry_loss, causal_lm_loss
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
        Schedule.from_config({"steps": 0, "warmup": -1, "min_lr_ratio": 2, "log_every": 0})
    msg = str(e.value)
    assert all(s in msg for s in ("lr is missing", "steps must be >= 1", "min_lr_ratio must be in [0, 1]",
                                  "log_every must be >= 1", "warmup must be >= 0"))


def test_batches_depend_only_on_seed_and_step_and_ranks_split_the_global_batch():
    whole = batches.indices(7, 42, 1000, 8)
    assert whole == batches.indices(7, 42, 1000, 8) and whole != batches.indices(7, 43, 1000, 8)
    assert batches.indices(7, 42, 1000, 8, 0, 2) + batches.indices(7, 42, 1000, 8, 1, 2) == whole
    with pytest.raises(ValueError, match="does not split"):
        batches.indices(7, 42, 1000, 8, 0, 3)


def test_sft_batches_padded_on_the_right_give_each_row_its_unpadded_loss(tmp_path):
    """SFT pads rows of different lengths on the right, with no attention mask: causal attention keeps
    the padding out of every real token's logits, so the batch loss is the loss of the rows alone."""
    import torch

    from stages import sft
    from stages.ml import lm
    from stages.ml.losses import causal_lm_loss

    folder = _small_model(tmp_path)
    tok, model = lm.load_tokenizer(folder), lm.load_model(folder).eval()
    rows, masks = sft.encode_pairs(tok, [{"prompt": "1+2=", "answer": "3"}, {"prompt": "45+9=", "answer": "54"},
                                         {"prompt": "59+55=", "answer": "114"}])
    ids, mask = sft.pad_right(rows, masks, tok.pad_token_id)
    assert ids.shape == (3, max(len(r) for r in rows)) and mask.sum() == sum(map(sum, masks))
    with torch.no_grad():
        batch = causal_lm_loss(model, ids, None, mask, tokens=float(sum(sum(m[1:]) for m in masks)))
        alone = [causal_lm_loss(model, torch.tensor([r]), None, torch.tensor([m]), tokens=1.0) for r, m in zip(rows, masks)]
    assert batch.item() == pytest.approx(sum(a.item() for a in alone) / sum(sum(m[1:]) for m in masks), abs=1e-6)


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


# ---- eval's answer checking and prompts, export's folder (nano3's keys on a small random model) ----

def test_math_verifier_takes_the_final_answer_and_compares_it_normalised():
    from stages.ml.rewards import extract_answer, math_verify

    right = [("so the answer is \\boxed{\\frac{1}{2}}.", "0.5"), ("The answer is 68.", "68"), ("68", "68"),
             ("total $1,000.", "1000"), ("\\boxed{1{,}000}", "1000"), ("x = 5", "5"), ("\\boxed{x=5}", "5"),
             ("\\boxed 7", "7"), ("\\fbox{3/4}", "\\dfrac34"), ("-3", "-3"), ("2.50", "5/2"),
             ("\\boxed{\\text{(B)}}", "(B)"), ("\\boxed{90^\\circ}", "90"), ("50\\%", "50"),
             ("first 3, then \\boxed{4} and later 9", "4"), ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
             ("it is 12", "\\boxed{12}")]
    wrong = [("6 8", "68"), ("3", "-3"), ("no answer", "5"), ("\\boxed{2", "2"), ("\\boxed{}", "0"), ("", ""),
             ("\\boxed{4} or 9", "9"), ("680", "68"), ("0.333", "1/3")]
    assert [r for r, a in right if math_verify(r, a) != 1.0] == []
    assert [r for r, a in wrong if math_verify(r, a) != 0.0] == []
    assert extract_answer("a \\boxed{\\frac{1}{2}} b") == "\\frac{1}{2}" and extract_answer("none") is None


def _small_model(root: Path, chat_template: str | None = None) -> Path:
    from stages import data
    from stages.ml import lm

    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "train.txt").write_text("1+2=3\n45+9=54\n")
    tokenizer = lm.load_tokenizer(data._train_tokenizer(root / "tokenizer", root / "corpus" / "train.txt"))
    if chat_template:
        tokenizer.chat_template = chat_template
    torch.manual_seed(0)
    model = lm.build_model({"hidden": 64, "intermediate": 128, "layers": 2, "heads": 2, "max_len": 32}, tokenizer)
    return lm.save_model(model, tokenizer, root / "model")


def test_eval_prompts_go_through_the_chat_template_with_its_kwargs(tmp_path: Path):
    from stages.ml import lm
    from stages.eval import prompt_ids

    template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}{% if think %}={% endif %}"
    tok = lm.load_tokenizer(_small_model(tmp_path, template))
    plain = lm.encode(tok, ["1+2"], bos=True)
    assert prompt_ids(tok, ["1+2"]) == plain
    assert prompt_ids(tok, ["1+2"], {"think": True}) == [plain[0] + tok("=", add_special_tokens=False)["input_ids"]]
    tok.chat_template = None
    assert prompt_ids(tok, ["1+2"]) == plain                          # no template: <bos> + prompt
    with pytest.raises(ValueError, match="no chat template"):         # and kwargs would go nowhere
        prompt_ids(tok, ["1+2"], {"think": True})


def test_eval_config_reads_or_refuses_every_key():
    from jobs import recipes
    from stages.eval import check_config

    nano3 = recipes.load("nano3")
    res = nano3.stage("eval").resources

    def problems(*overrides):
        return check_config(recipes.compose(nano3, "eval", list(overrides)), resources=res)

    assert problems() == []
    from stages.eval import preview
    shown = preview(recipes.compose(nano3, "eval", []), res)
    assert "2 vLLM engine process(es), CUDA_VISIBLE_DEVICES 0,1,2,3 | 4,5,6,7" in shown
    assert 'mamba_ssm_cache_dtype="float32"' in shown and '{"enable_thinking": true}' in shown
    assert problems("eval.top_p=1.5") == ["eval.top_p must be a number in (0, 1] (got 1.5)"]
    assert problems("+eval.vllm_cfg.enable_thinking=true")[0].startswith("eval.vllm_cfg has unknown key enable_thinking")
    assert problems("+eval.topp=1") == [p for p in problems("+eval.topp=1") if "unknown key topp" in p] != []
    assert problems("eval.vllm_cfg.data_parallel_size=4") == \
        ["eval.vllm_cfg: tensor_parallel_size x data_parallel_size = 16 > the node's 8 GPUs"]
    assert problems("+eval.vllm_kwargs.seed=1") == ["eval.vllm_kwargs may not set seed (eval sets it from its own keys)"]
    assert problems("eval.backend=hf") == [f"eval.{k} applies only to eval.backend=vllm (remove it, or set the backend)"
                                           for k in ("vllm_cfg", "vllm_kwargs", "vllm_python")]
    assert problems("eval.greedy=1", "eval.n_samples=1e30") == ["eval.n_samples must be an integer in [1, 4096] (got 1e+30)",
                                                                "eval.greedy must be true or false (got 1)"]


def test_export_writes_nano3s_keys_shards_and_checks_the_folder_in_a_fresh_process(tmp_path: Path):
    import json as _json

    from jobs import recipes
    from stages import export
    from stages.ml import lm

    src = _small_model(tmp_path / "in", "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    config = recipes.compose(recipes.load("nano3"), "export", ["export.max_shard_size=50KB", "tracking.wandb=disabled",
                                                               "tracking.tensorboard=false"])
    assert export.check_config(config) == []
    (tmp_path / "run").mkdir()
    ctx = StageContext(run_id="r1", recipe="nano3", stage="export", config=config, inputs={"model": src},
                       run_dir=tmp_path / "run")
    out = export.run(ctx)["hf"]                         # verify_load: true ran the fresh-process check

    shards = sorted(out.glob("*.safetensors"))
    assert len(shards) > 1 and (out / "model.safetensors.index.json").is_file()
    gen = _json.loads((out / "generation_config.json").read_text())
    assert (gen["temperature"], gen["top_p"], gen["max_new_tokens"], gen["do_sample"]) == (1.0, 1.0, 16384, True)
    assert "run r1" in (out / "README.md").read_text()
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    assert lm.load_tokenizer(out).chat_template == lm.load_tokenizer(src).chat_template
    weights = {}
    for shard in shards:
        from safetensors import safe_open
        with safe_open(shard, "pt") as f:
            weights |= {k: f.get_tensor(k) for k in f.keys()}
    assert {str(t.dtype) for t in weights.values()} == {"torch.bfloat16"}
    original = lm.load_model(src).state_dict()
    assert all(torch.equal(weights[k], original[k].to(torch.bfloat16)) for k in weights)

    # The check itself: a wrong expectation and a broken folder are each found, one line per problem.
    expected = {k: (list(t.shape), "bfloat16") for k, t in original.items()}
    probe = lm.load_tokenizer(src)(export.PROBE)["input_ids"]
    assert export.verify_load(out, expected, probe) == []
    name = sorted(expected)[0]
    wrong = {**expected, name: (expected[name][0], "float32")}
    assert export.verify_load(out, wrong, probe) == [f"tensor {name}: {expected[name][0]} bfloat16, expected {expected[name][0]} float32"]
    shards[0].unlink()
    broken = export.verify_load(out, expected, probe)
    assert len(broken) == 1 and broken[0].startswith(f"loading {out} in a fresh process failed") and "\n" not in broken[0]


def test_export_config_refuses_pickles_and_bad_values():
    from jobs import recipes
    from stages.export import check_config

    for name in ("tiny", "nano3"):
        assert check_config(recipes.compose(recipes.load(name), "export", [])) == [], name
    bad = check_config(recipes.compose(recipes.load("nano3"), "export", [
        "export.safe_serialization=false", "export.max_shard_size=5 gigs", "export.dtype=fp8",
        "export.generation_config.max_new_tokens=-1", "+export.max_new_tokens=5"]))
    assert len(bad) == 5 and all("\n" not in p for p in bad)
    assert any("safe_serialization must be true" in p for p in bad)
