"""The vLLM rollout engine against HF generate on the tiny model: same greedy ids, seeded sampling,
a weight refit that takes effect, and the same engine inside a Ray actor. One engine for the file
(LLM() init takes seconds)."""
from pathlib import Path

import pytest

from stages import data
from stages.ml import lm
from stages.ml.generate import generate_ids

pytestmark = pytest.mark.slow

ARCH = {"hidden": 128, "intermediate": 384, "layers": 4, "heads": 4, "max_len": 48}
PROMPTS = ["12+34=", "7+5=", "99+1=", "40+40=", "3+", "1 2 3", "", "55+"]


def _tokenizer(root: Path):
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text("".join(f"{a}+{b}={a + b}\n" for a in range(10) for b in range(10)))
    return lm.load_tokenizer(data._train_tokenizer(root / "tokenizer", corpus / "train.txt"))


def _trained_model(tokenizer, seed: int, steps: int):
    """A model whose greedy outputs depend on its seed: random init plus a few SGD steps on sums,
    so the logits have margins a float reordering cannot flip."""
    import torch

    torch.manual_seed(seed)
    model = lm.build_model(ARCH, tokenizer)
    rows = lm.encode(tokenizer, [f"{a}+{b}={a + b}" for a, b in [(12, 34), (7, 5), (40, 2), (3, 3)]], eos=True)
    ids, mask = lm.pad(rows, tokenizer.pad_token_id)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two saved models (different seeds), their HF greedy ids on PROMPTS, and the prompt ids."""
    root = tmp_path_factory.mktemp("vllm engine")
    tokenizer = _tokenizer(root)
    prompts = lm.encode(tokenizer, PROMPTS, bos=True)
    out = {"prompts": prompts, "eos": tokenizer.eos_token_id}
    for name, seed in (("a", 0), ("b", 1)):
        model = _trained_model(tokenizer, seed, steps=20)
        out[name] = lm.save_model(model, tokenizer, root / name)
        out[f"{name}_greedy"] = generate_ids(model, tokenizer, prompts, 12)
    return out


@pytest.fixture(scope="module")
def engine(models):
    """The in-process engine; teardown ends the torch.distributed group vLLM opened in this process."""
    from stages.backends.vllm_engine import VLLMEngine

    yield VLLMEngine(models["a"], seed=0)
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()


def test_greedy_ids_equal_hf_greedy(models, engine):
    got = engine.generate(models["prompts"], n=1, temperature=0.0, max_new_tokens=12, seed=0)
    assert got == models["a_greedy"]
    assert len({tuple(g[0]) for g in got}) > 1        # the model says different things to different prompts


def test_sampling_gives_n_responses_ending_at_eos_or_the_limit_and_repeats_with_its_seed(models, engine):
    prompts, eos = models["prompts"], models["eos"]
    first = engine.generate(prompts, n=4, temperature=1.0, max_new_tokens=6, seed=7)
    assert len(first) == len(prompts) and all(len(group) == 4 for group in first)
    for group in first:
        for r in group:
            assert 1 <= len(r) <= 6
            assert eos not in r[:-1] and (r[-1] == eos or len(r) == 6)
    assert engine.generate(prompts, n=4, temperature=1.0, max_new_tokens=6, seed=7) == first
    assert engine.generate(prompts, n=4, temperature=1.0, max_new_tokens=6, seed=8) != first
    assert len({tuple(r) for group in first for r in group}) > len(prompts)   # samples, not n copies
    twice = engine.generate([prompts[0], prompts[0]], n=4, temperature=1.0, max_new_tokens=6, seed=7)
    assert twice[0] != twice[1]                       # a repeated prompt is not a repeated draw


def test_load_weights_switches_to_the_other_models_greedy_ids(models, engine):
    assert models["a_greedy"] != models["b_greedy"]
    engine.load_weights(models["b"])
    try:
        assert engine.generate(models["prompts"], n=1, temperature=0.0, max_new_tokens=12, seed=0) == models["b_greedy"]
    finally:
        engine.load_weights(models["a"])
    assert engine.generate(models["prompts"], n=1, temperature=0.0, max_new_tokens=12, seed=0) == models["a_greedy"]


def test_the_caller_keeps_control_of_torch_threads_and_its_subprocesses_loader(engine):
    import os

    import torch

    assert "tcmalloc" not in os.environ.get("LD_PRELOAD", "")

    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1
    torch.set_num_threads(wanted)         # vLLM's CPU worker turns this into a no-op process-wide
    try:
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def ray_local():
    """A private one-node Ray, its session files under /tmp (socket paths must stay short)."""
    import shutil
    import tempfile

    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray-vllm-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_engine_runs_and_refits_inside_a_ray_actor(models, ray_local):
    from stages.backends.vllm_engine import VLLMEngine

    actor = ray_local.remote(num_cpus=1)(VLLMEngine).remote(models["a"], seed=0, threads=1)
    greedy = dict(n=1, temperature=0.0, max_new_tokens=12, seed=0)
    assert ray_local.get(actor.generate.remote(models["prompts"], **greedy), timeout=600) == models["a_greedy"]
    ray_local.get(actor.load_weights.remote(models["b"]), timeout=120)
    assert ray_local.get(actor.generate.remote(models["prompts"], **greedy), timeout=120) == models["b_greedy"]
