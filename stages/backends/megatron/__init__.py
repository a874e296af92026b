"""The Megatron-Bridge backend for nano3's pretrain and SFT: GPU container only, never run here."""
