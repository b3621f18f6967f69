#!/usr/bin/env python3
"""A shrunken MiniMax-M3 replica for decode timing (docs/BENCHMARKS.md, "MiniMax-M3 and DeepSeek-V4 decode").

transformers 5.24's MiniMaxM3VLTextConfig defaults are MiniMax-M3's text shapes: hidden 6144, 64
query heads / 4 KV heads of head_dim 128 (rotary 64), routed experts of 3072 with top-4 of 128,
a shared expert of 3072, dense MLPs of 12288, a 4-head × 128 lightning indexer with blocks of 128
keeping 16 (exactly dense up to 2,048 positions), vocab 200064. Kept: all of those. Shrunk: 2
layers (one full-attention layer with a dense MLP, one block-sparse layer with the MoE; M3 has 60),
8 routed experts (a token still reads 4 of them and the shared one), vocab 16384. Random weights
(seeded), bfloat16, saved by save_pretrained in transformers' names (MiniMaxM3VLForCausalLM); then
`fp4lm quantize --algo W4A16_NVFP4` with ModelOpt's exclusions (docs/RUNTIME.md) quantizes the
routed experts only.

  /work/venvs/torch/bin/python scripts/make_minimax_m3_replica.py OUT_DIR
"""
import sys

import torch
from transformers import MiniMaxM3VLForCausalLM, MiniMaxM3VLTextConfig


def main():
    out = sys.argv[1]
    cfg = MiniMaxM3VLTextConfig(num_hidden_layers=2, num_local_experts=8, vocab_size=16384,
                                layer_types=["full_attention", "minimax_m3_sparse"], mlp_layer_types=["dense", "sparse"],
                                max_position_embeddings=65536, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(47)
    torch.set_default_dtype(torch.bfloat16)
    with torch.no_grad():
        model = MiniMaxM3VLForCausalLM(cfg)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p, dtype=torch.float32))  # Gemma-style: 1 + w
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(out)
    print(out, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()
