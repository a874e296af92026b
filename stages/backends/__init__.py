"""The other engines a stage can hand its work to: Megatron-Bridge (megatron/), NeMo RL (nemo_rl.py
and its construction checks) and vLLM (vllm_engine.py). A backend never imports a stage."""
