"""Our rendered Megatron-Bridge run against the real Bridge 0.3.1 + megatron-core 0.16.1 on CPU, in
.venv-bridge (dev/bridge_venv.sh; transformers<5 keeps it apart from the project venv):

- AutoBridge's conversion of a tiny HF Llama (426k parameters) to Megatron, saved as a Megatron
  checkpoint, and `export_ckpt` back to HF: every tensor bit-identical, equal logits, and the
  Megatron model's own forward matching HF's (tests/stages/bridge_roundtrip.py);
- the nano3 pretrain and sft overrides, rendered for Bridge 0.3.1, applied by the rendered
  bridge_train.py's own `config()` to Bridge's real Nemotron-3-Nano recipes, pass
  ConfigContainer.validate(): no key skipped, blend set (no mock data), FinetuningDatasetConfig
  (no SQuAD), our layout in place;

CPU stand-ins live in tests/stages/bridge_cpu.py only. Fails when the venv is absent: the test
command builds it."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from jobs import recipes
from stages.contract import Distributed, StageContext
from stages.backends.megatron import launch

ROOT = Path(__file__).resolve().parents[2]
PY = ROOT / ".venv-bridge" / "bin" / "python"
HERE = Path(__file__).resolve().parent



@pytest.fixture(autouse=True)
def _bridge_venv():
    """The test command's set-up builds the venv: without it these tests fail, saying how to build it."""
    if not PY.exists():
        pytest.fail(f"{PY} is missing: run dev/bridge_venv.sh (dev/test.sh does) to run the real-Bridge tests")

# One interpreter validates every rendered script given (SCRIPT WORLD_SIZE pairs), one JSON line each:
# importing Bridge and megatron-core is most of the time a validation takes.
VALIDATE = r"""
import importlib.util, json, os, sys
sys.path.insert(0, sys.argv[1])
import bridge_cpu
for path, world in zip(sys.argv[2::2], sys.argv[3::2]):
  os.environ["WORLD_SIZE"] = world
  skipped = bridge_cpu.catch_skipped()
  spec = importlib.util.spec_from_file_location("bridge_train", path)
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)          # __name__ != "__main__": only the definitions
  cfg = script.config()                    # Bridge's recipe + our overrides, applied by the rendered code
  for k, v in bridge_cpu.CPU_MOE.items():
    setattr(cfg.model, k, v)
  cfg.validate()
  d = cfg.dataset
  print(json.dumps({
    "skipped": skipped, "dataset": type(d).__name__,
    "mock": getattr(d, "mock", None), "blend": getattr(d, "blend", None),
    "blend_per_split": getattr(d, "blend_per_split", None), "dataset_root": str(getattr(d, "dataset_root", None)),
    "dataset_name": getattr(d, "dataset_name", None),
    "packed": type(getattr(d, "packed_sequence_specs", None)).__name__,
    "tp": cfg.model.tensor_model_parallel_size, "ep": cfg.model.expert_model_parallel_size,
    "gbs": cfg.train.global_batch_size, "lr": cfg.optimizer.lr, "seq": cfg.model.seq_length,
    "load": cfg.checkpoint.load, "eval_interval": cfg.train.eval_interval,
}, default=str))
"""


def rendered(tmp_path, stage, version="0.3.1"):
    """prepare() for a nano3 stage, rendered for a Bridge version (0.3.1: the one installed here), with
    real input folders. dev/bridge_nano_v3.py renders the same for nano-v3."""
    nano3 = recipes.load("nano3")
    cfg = recipes.compose(nano3, stage, [])
    if stage == "pretrain":
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        (corpus / "blend.json").write_text('{"web/train_00000": 0.6, "math/train_00000": 0.4}')
        (corpus / "blend_valid.json").write_text('{"web/valid_00000": 1.0}')
        inputs = {"corpus": corpus, "tokenizer": tmp_path / "tok"}
    else:
        data = tmp_path / "sft_data"
        data.mkdir()
        (data / "bridge.json").write_text(json.dumps({
            "dataset_kwargs": {"prompt_template": "{input}{output}", "label_key": "output"},
            "packed_sequence_specs": {"packed_sequence_size": 4096, "packed_train_data_path": "packed/training_4096.npy",
                                      "packed_val_data_path": "packed/validation_4096.npy",
                                      "packed_metadata_path": "packed/4096_metadata.jsonl"}}))
        (data / "packed").mkdir()
        for name in ("training_4096.npy", "validation_4096.npy", "4096_metadata.jsonl"):   # Bridge checks they exist
            (data / "packed" / name).touch()
        inputs = {"model": tmp_path / "model", "data": data}
    res = nano3.stage(stage).resources
    ctx = StageContext(run_id="r1", recipe="nano3", stage=stage, config=cfg, inputs=inputs,
                       run_dir=tmp_path / "run", dist=Distributed(world_size=res["nodes"]))
    job = launch.translate(cfg, stage, hf_model=str(inputs.get("model", "nvidia/base")),
                           data=launch.stage_data(stage, inputs, cfg.get("base_model", {}))[2],
                           checkpoint_dir=str(ctx.checkpoint_dir), export_dir=str(tmp_path / "out"),
                           log_dir=str(ctx.run_dir), run_name="r1", gpus=res["nodes"] * res["gpus_per_node"],
                           version=version)
    folder = tmp_path / "megatron"
    folder.mkdir()
    (folder / "bridge_overrides.yaml").write_text(launch.overrides_yaml(job))
    (folder / "bridge_train.py").write_text(launch.render_train(job, str(folder / "bridge_overrides.yaml")))
    return job, folder / "bridge_train.py", res["nodes"] * res["gpus_per_node"]


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """nano3's pretrain and sft rendered and validated by Bridge, in one process: {stage: (folder, result)}."""
    folders, args = {}, []
    for stage in ("pretrain", "sft"):
        folders[stage] = tmp_path_factory.mktemp(stage)
        job, script, world = rendered(folders[stage], stage)
        args += [str(script), str(world)]
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([str(PY), "-c", VALIDATE, str(HERE), *args], capture_output=True, text=True, env=env,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")][-2:]
    return {stage: (folders[stage], json.loads(line)) for stage, line in zip(folders, lines)}


def test_pretrain_overrides_validate_in_the_real_bridge_with_the_blend_and_no_mock_data(validated):
    tmp_path, out = validated["pretrain"]
    assert out["skipped"] == []
    assert out["dataset"] == "GPTDatasetConfig" and out["mock"] is False and out["blend"] is None
    assert out["blend_per_split"][0] == [[str(tmp_path / "corpus" / "math/train_00000"), str(tmp_path / "corpus" / "web/train_00000")],
                                         [0.4, 0.6]]
    assert (out["tp"], out["ep"], out["gbs"], out["seq"]) == (4, 8, 768, 8192)
    assert out["lr"] == 1e-4 and out["eval_interval"] == 500 and out["load"].endswith("checkpoints/megatron")


def test_sft_overrides_validate_with_our_finetuning_dataset_not_squad(validated):
    tmp_path, out = validated["sft"]
    assert out["skipped"] == []
    assert out["dataset"] == "FinetuningDatasetConfig" and out["dataset_name"] is None
    assert out["dataset_root"] == str(tmp_path / "sft_data") and out["packed"] == "PackedSequenceSpecs"
    assert (out["ep"], out["gbs"], out["seq"]) == (8, 256, 4096)


def test_autobridge_round_trip_is_bit_identical_and_megatron_logits_match_hf(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "MASTER_PORT": "29531"}
    p = subprocess.run([str(PY), str(HERE / "bridge_roundtrip.py"), str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=900, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["tensors"] == out["back"] == out["identical"] == 21       # embeddings, 2 layers x 9, norm, head
    assert out["logits_max_abs_diff"] == 0.0
    assert out["megatron_vs_hf_logits"] < 1e-5                            # measured 3.9e-07 (float32)
    assert (tmp_path / "megatron" / "iter_0000000").is_dir()
