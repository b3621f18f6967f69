#!/usr/bin/env python3
"""A shrunken DeepSeek-V4-Flash replica for decode timing (docs/BENCHMARKS.md, "DeepSeek-V4 decode").

transformers 5.24's DeepseekV4Config defaults are DeepSeek-V4-Flash(-Base)'s shapes: hidden 4096,
64 heads of head_dim 512, one shared K=V head, q_lora_rank 1024, o_groups 8 × o_lora_rank 1024,
sliding window 128, CSA every 4 tokens with a 64-head × 128 indexer keeping 512, HCA every 128,
experts of 2048 with top-6, 4 residual streams. Kept: every one of those. Shrunk: 2 layers (one
compressed-sparse, one heavily-compressed; Flash has 43), 8 routed experts (Flash 256; a token
still reads 6 of them and the shared one), vocab 16384 (Flash 129280). Random weights (seeded),
bfloat16, saved under DeepSeek's native names as scripts/make_deepseek_v4_goldens.py does; then
`fp4lm quantize --algo W4A16_NVFP4` gives the NVFP4 form.

  /work/venvs/torch/bin/python scripts/make_deepseek_v4_replica.py OUT_DIR
"""
import json
import os
import re
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cfg = DeepseekV4Config(num_hidden_layers=2, n_routed_experts=8, vocab_size=16384, num_nextn_predict_layers=0,
                           layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
                           mlp_layer_types=["moe", "moe"], max_position_embeddings=65536)
    torch.manual_seed(47)
    torch.set_default_dtype(torch.bfloat16)
    with torch.no_grad():
        model = DeepseekV4ForCausalLM(cfg)
        for name, p in model.named_parameters():
            if name.endswith(("bias", "base", "sinks", "scale")) or "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p, dtype=torch.float32))
            else:
                p.normal_(0.0, 0.02)
    # save_pretrained writes transformers' per-expert names (its conversion mapping reversed),
    # then DeepSeek's native top-level names, as make_deepseek_v4_goldens.py.
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tensors = {}
        for k, v in load_file(os.path.join(tmp, "model.safetensors")).items():
            k = re.sub(r"^model\.", "", k)
            k = {"embed_tokens.weight": "embed.weight", "hc_head.hc_fn": "hc_head_fn", "hc_head.hc_base": "hc_head_base",
                 "hc_head.hc_scale": "hc_head_scale"}.get(k, k)
            tensors[k] = v.contiguous()
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    c = json.loads(cfg.to_json_string())
    c["architectures"] = ["DeepseekV4ForCausalLM"]
    c["dtype"] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    print(out, sum(v.numel() for v in tensors.values()), "parameters")


if __name__ == "__main__":
    main()
