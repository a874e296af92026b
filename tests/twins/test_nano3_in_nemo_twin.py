"""nano3's stages run as a job runs them, in the nemo image's CPU twin. The Megatron stages (pretrain and
sft, `backend: megatron`): a recorded run, the job's entry (runtime.entry.execute, started the way a container job starts:
runtime.bootstrap with the runtime bundle) in the twin's Python, the backend's run_stage (translate, the
rendered overrides and scripts), and Megatron-Bridge 1cedb0a9c's own AutoBridge.import_ckpt of a toy
model, from the twin's source under that Python. The machine has no GPU, so the run stops where Bridge
first asks torch for CUDA, and its record says so: failure class gpu_boundary at Bridge's file and line,
read from the import program's output, every phase before it done.

The toy base is a one-layer Qwen2: AutoBridge builds its Megatron provider from the HF config and
megatron-core's TransformerConfig checks it (on CPU); a Llama's provider asks for rope fusion, which
needs Transformer Engine, absent from the twin (dev/twin_standins.txt).

The stages that need no GPU (prep_sft on the toy sources of tests/fixtures/nano3_sources, export of the toy
model) run there to the end: their outputs registered, with the image's libraries."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from twin import NEMO_TWIN, TOY_BRIDGE

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nano3_sources"))

NEMO_TWIN.require()
pytestmark = pytest.mark.slow

BOUNDARY = "megatron/bridge/models/model_provider.py"
#: Run in the twin as `python -c TOY DIR`: a one-layer Qwen2 with a character tokenizer in DIR, and a Megatron
#: indexed shard of its tokens in DIR/corpus (megatron-core's own writer) with prep_pretrain's blend.json.
TOY = """
import json, sys
from pathlib import Path
import numpy, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
out = Path(sys.argv[1])
words = ["<pad>", "<s>", "</s>", "<unk>", *"0123456789+=?"]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
fast.save_pretrained(out / "model")
Qwen2ForCausalLM(Qwen2Config(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)).save_pretrained(out / "model")
(out / "corpus" / "toy").mkdir(parents=True)
shard = IndexedDatasetBuilder(str(out / "corpus" / "toy" / "train_00000.bin"), dtype=numpy.int32)
for a in range(1, 40):
    shard.add_document(torch.tensor(fast(f"{a}+{a}={2 * a}")["input_ids"] + [fast.eos_token_id]), [1])
shard.finalize(str(out / "corpus" / "toy" / "train_00000.idx"))
(out / "corpus" / "blend.json").write_text(json.dumps({"toy/train_00000": 1.0}))
"""
#: Each stage's inputs (folder under the toy's, kind) and the overrides that make it toy-sized (TOY_BRIDGE);
#: pretrain starts from the toy (base_model), sft from the toy as its `model` input.
STAGES = {
    "pretrain": ({"corpus": ("corpus", "pretrain-blend"), "tokenizer": ("model", "tokenizer")}, TOY_BRIDGE["pretrain"]),
    "sft": ({"model": ("model", "model"), "data": ("sft", "sft-data")}, TOY_BRIDGE["sft"]),
}


def refusal_line() -> int:
    """The line of the twin's model_provider.py where provide_distributed_model asks torch for its GPU."""
    lines = (NEMO_TWIN.checkout / "src" / BOUNDARY).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("def provide_distributed_model("))
    return next(i + 1 for i, line in enumerate(lines) if i > start
                and line.strip() == "torch.cuda.set_device(get_local_rank_preinit())")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    r = NEMO_TWIN.run(["-c", TOY, str(root)])
    assert r.returncode == 0, r.stderr[-2000:]
    (root / "sft").mkdir()
    (root / "sft" / "training.jsonl").write_text("".join(json.dumps({"input": f"{a}+{a}=", "output": str(2 * a)}) + "\n"
                                                         for a in range(1, 20)))
    (root / "sft" / "validation.jsonl").write_text((root / "sft" / "training.jsonl").read_text())
    return root


def through_the_entry(root: Path, stage: str, folders: dict[str, Path], kinds: dict[str, str], overrides: list[str]):
    """nano3's `stage` recorded as the submit path records it, its inputs added with `jobs add` (as a user
    brings their own), then run by the job's entry in the twin's Python: (store, run id, the process)."""
    from helpers import run_jobs
    from lineage import Store

    for role, folder in folders.items():
        added = run_jobs(root, "add", str(folder), "--kind", kinds[role], "--name", f"toy/{role}")
        assert added.code == 0, added.err
    run_id, r = NEMO_TWIN.execute(root, "nano3", stage, [f"{role}=toy/{role}:latest" for role in folders], overrides)
    return Store(root), run_id, r


@pytest.mark.parametrize("stage", list(STAGES))
def test_nano3_megatron_stage_through_the_job_entry_stops_at_the_gpu_boundary(stage, toy, tmp_path):
    roles, overrides = STAGES[stage]
    root = tmp_path / "store"
    store, run_id, r = through_the_entry(root, stage, {role: toy / folder for role, (folder, _) in roles.items()},
                                         {role: kind for role, (_, kind) in roles.items()},
                                         [f"base_model.hf_model_id={toy / 'model'}", *overrides])
    assert r.returncode != 0
    view = store.run(run_id)
    (attempt,) = view.attempts
    assert view.state == "FAILED" and attempt["failure_class"] == "gpu_boundary", (attempt, r.stderr[-3000:])
    assert attempt["boundary"]["file"] == BOUNDARY and attempt["boundary"]["line"] == refusal_line(), attempt
    assert attempt["python_executable"].startswith(str(NEMO_TWIN.venv))   # the job ran in the twin's Python
    # Nothing failed before it: inputs verified, our overrides rendered for Bridge 1cedb0a9c, and Bridge's
    # import of the toy got as far as building its Megatron model (the HF config read, the provider's
    # TransformerConfig checked) before it asked for the GPU.
    assert {"verify", "stage"} <= set(attempt["phases"])
    megatron = store.run_dir(run_id) / "megatron"
    assert (megatron / "bridge_overrides.yaml").is_file() and (megatron / "bridge_train.py").is_file()
    start = toy / "model" if stage == "pretrain" else root   # the base model, or sft's `model` artifact in the store
    assert f"AutoBridge.import_ckpt('{start}" in (megatron / "bridge_import.py").read_text()
    # The import program's traceback, streamed into the job's log before the entry's own.
    (imported,) = [t for t in r.stderr.split("Traceback (most recent call last):") if "bridge_import.py" in t.split("\n")[1]]
    assert "in import_ckpt" in imported and f"{BOUNDARY}\", line {refusal_line()}" in imported, imported

    from helpers import run_jobs

    shown = run_jobs(root, "show", run_id)
    assert shown.code == 0, shown.err
    assert f"stopped at GPU boundary: {BOUNDARY}:{refusal_line()}" in shown.out and "class gpu_boundary" in shown.out, shown.out


@pytest.mark.parametrize("stage", ["prep_sft", "export"])
def test_nano3_cpu_stage_through_the_job_entry_succeeds_in_the_nemo_twin(stage, toy, tmp_path):
    import make

    if stage == "prep_sft":   # the sources made by the twin's libraries (its tokenizer files are transformers 4.57's)
        r = NEMO_TWIN.run([make.__file__, str(tmp_path / "sources")])
        assert r.returncode == 0, r.stderr[-2000:]
        folders, kinds = {"tokenizer": tmp_path / "sources" / "tokenizer"}, {"tokenizer": "tokenizer"}
        overrides = make.overrides(tmp_path / "sources")["prep_sft"]
    else:
        folders, kinds, overrides = {"model": toy / "model"}, {"model": "model"}, []
    store, run_id, r = through_the_entry(tmp_path / "store", stage, folders, kinds, overrides)
    view = store.run(run_id)
    assert r.returncode == 0 and view.state == "SUCCEEDED", (view.attempts, r.stderr[-3000:])
    assert view.attempts[-1]["python_executable"].startswith(str(NEMO_TWIN.venv))
    from jobs import recipes

    assert set(view.outputs) == set(recipes.load("nano3").stages[stage].outputs), view.outputs   # registered


#: What the rendered scripts import (launch.py's IMPORT, TRAIN, EXPORT), and where each must come from.
IMPORTS = """
import json, megatron.bridge, megatron.core
from megatron.bridge import AutoBridge
from megatron.bridge.training.pretrain import pretrain
from megatron.bridge.training.finetune import finetune
from megatron.bridge.training.gpt_step import forward_step
try:
    import megatron.bridge.recipes.nemotronh.nemotron_3_nano
    recipe = None
except ImportError as e:
    recipe = e.name
print(json.dumps({"bridge": megatron.bridge.__file__, "core": megatron.core.__file__, "recipe": recipe}))
"""


def test_the_twin_imports_what_the_rendered_scripts_import_from_the_pinned_sources():
    """Bridge's src/ and the Megatron-LM tree on the path as the image's editable install has them; the
    Nano-3 recipe lacks only Transformer Engine, which dev/twin_standins.txt lists as absent."""
    r = NEMO_TWIN.run(["-W", "ignore", "-c", IMPORTS])
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["bridge"] == str(NEMO_TWIN.checkout / "src" / "megatron" / "bridge" / "__init__.py")
    assert got["core"] == str(NEMO_TWIN.venv / "Megatron-LM" / "megatron" / "core" / "__init__.py")
    assert got["recipe"] == "transformer_engine"
