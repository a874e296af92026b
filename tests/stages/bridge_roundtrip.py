"""Runs in .venv-bridge (tests/stages/test_bridge_real.py): a tiny HF Llama -> Megatron (Bridge's own
conversion, megatron-core's non-TE layer spec) -> saved Megatron checkpoint -> AutoBridge.export_ckpt
-> HF again. Prints one JSON line: tensors compared bit for bit, logits differences. Usage: WORK_DIR."""
import json
import os
import sys
import time

t0 = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bridge_cpu  # noqa: E402  (before megatron.bridge)
from megatron_local import cpu_model  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def main():
    work = sys.argv[1]
    hf, mdir, back = f"{work}/hf", f"{work}/megatron", f"{work}/hf_back"
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(hf)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 512)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(hf)
    patched = bridge_cpu.answer_cuda_queries()
    bridge_cpu.single_process_group()
    from megatron.bridge import AutoBridge
    bridge, mm = cpu_model(hf)    # the fusions need TE or CUDA kernels (the literal import_ckpt fails on apply_rope_fusion): off
    from megatron.core.tensor_parallel.random import initialize_rng_tracker
    initialize_rng_tracker(inference_rng_tracker=True)      # no CUDA RNG states to fork
    ids = torch.randint(3, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    causal = torch.triu(torch.ones(24, 24, dtype=torch.bool), diagonal=1)[None, None]   # True = masked
    gpt = mm[0].eval()
    with torch.no_grad():
        mlog = gpt(ids, torch.arange(24)[None].expand(2, -1), causal)
        mdiff = (mlog - model.eval()(ids).logits).abs().max().item()
    bridge.save_megatron_model(mm, mdir)
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()        # export_ckpt makes its own single-process group
    AutoBridge.from_hf_pretrained(hf, torch_dtype=torch.float32).export_ckpt(mdir, back, show_progress=False)
    from safetensors.torch import load_file
    a, b = load_file(f"{hf}/model.safetensors"), load_file(f"{back}/model.safetensors")
    same = sorted(k for k in a if k in b and a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]))
    back_model = LlamaForCausalLM.from_pretrained(back, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        d = (model.eval()(ids).logits - back_model(ids).logits).abs().max().item()
    print(json.dumps({"tensors": len(a), "back": len(b), "identical": len(same), "logits_max_abs_diff": d, "megatron_vs_hf_logits": mdiff,
                      "params": sum(p.numel() for p in model.parameters()), "patched": patched, "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
