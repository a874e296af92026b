"""nano3's GRPO in the nemo-rl image's CPU twin, as far as a CPU allows: our Ray start-up brings up a
two-node Ray 2.49.2 cluster, NeMo RL's own run_grpo_math.py loads our rendered config with its own loader,
loads the tokenizer and the prompts, starts the math environment and the loggers, and stops where NeMo RL
asks Ray for the GPUs of the vLLM generation workers (the GPU boundary: no CUDA call is made before it).
A toy model and prompts stand for the SFT model and prep_rl's output."""
from __future__ import annotations

import os
import re

import pytest
import yaml

from jobs import recipes
from twin import NEMO_RL, require, run

require()
pytestmark = pytest.mark.slow

TOY = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
words = ["<pad>", "<s>", "</s>", "<unk>", *"0123456789+=?"]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
fast.save_pretrained(sys.argv[1])
LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)).save_pretrained(sys.argv[1])
"""
BOUNDARY = "nemo_rl/distributed/virtual_cluster.py"


def test_nano3_grpo_runs_nemo_rls_driver_in_the_twin_up_to_the_gpu_request(tmp_path):
    from stages.backends import nemo_rl

    r = run(["-c", TOY, str(tmp_path / "model")])
    assert r.returncode == 0, r.stderr[-2000:]
    (tmp_path / "prompts").mkdir()
    for split in ("train", "validation"):
        (tmp_path / "prompts" / f"{split}.jsonl").write_text(
            "".join(f'{{"prompt": "{a}+{a}=?", "answer": "{2 * a}"}}\n' for a in range(1, 9)))
    rec = recipes.load("nano3")
    res = dict(rec.stage("rl").resources)
    drv, cfg = nemo_rl.translate(recipes.compose(rec, "rl", [])["rl"], policy=tmp_path / "model",
                                 prompts=tmp_path / "prompts", prefs=tmp_path / "prefs", reward_model=tmp_path / "rm",
                                 nodes=res["nodes"], gpus_per_node=res["gpus_per_node"], run_dir=tmp_path / "run",
                                 wandb="offline")
    cfg["defaults"] = cfg["defaults"].replace(str(nemo_rl.REPO), str(NEMO_RL))   # the image's /opt/nemo-rl
    (tmp_path / "nemo_rl.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    r = run(["tests/twins/nemo_rl_driver.py", str(tmp_path / "run"), str(tmp_path / "nemo_rl.yaml"), drv.script],
            timeout=900, env={"SLURM_JOB_ID": f"9{os.getpid()}", "JOBS_RAY_READY_TIMEOUT_S": "120",
                              "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"})   # NeMo RL's own knob: ask once, not 6 times
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "driver exit 1" in r.stdout, out[-3000:]
    gpus = res["nodes"] * res["gpus_per_node"]
    # Our cluster up, then in order: NeMo RL's loader on our file, data, the loggers, then the refusal.
    assert "ray: 2 node(s) alive" in r.stderr
    marks = [f"Loaded configuration from: {tmp_path / 'nemo_rl.yaml'}", "▶ Setting up data...",
             "Initialized TensorboardLogger", "▶ Setting up model and training...",
             f"Not enough GPUs available. Requested {gpus} GPUs, but only 0 are available in the cluster."]
    at = [r.stdout.find(m) for m in marks]
    assert -1 not in at and at == sorted(at), dict(zip(marks, at))
    # Every traceback ends at the boundary, in NeMo RL's placement groups: nothing failed before it.
    tracebacks = re.findall(r"Traceback \(most recent call last\):\n(.*?)\n(\S[^\n]*)", out, re.S)
    assert tracebacks
    for frames, error in tracebacks:
        assert re.findall(r'File "([^"]+)", line', frames)[-1].endswith(BOUNDARY), frames
        assert error.startswith("nemo_rl.distributed.virtual_cluster.ResourceInsufficientError"), error
