#!/usr/bin/env python3
"""A mid-size random DiffusionGemma for throughput measurements (not a fixture; nothing checked in).

transformers builds DiffusionGemmaForBlockDiffusion (seeded) at shapes between the tiny fixture and
the published model: hidden 1024, 8 layers (3 sliding : 1 full), 32 experts top 4, vocabulary 16384,
canvas_length 64, weights saved as bfloat16, and a generation_config.json with max_denoising_steps 8
(a random model rarely settles, so each canvas runs its 8 passes). bench/diffusion_batch_bench.cpp
runs it (docs/BENCHMARKS.md, "DiffusionGemma: requests batched").

Run: /work/venvs/torch/bin/python scripts/make_diffusion_gemma_bench_model.py OUT_DIR
"""
import json
import os
import sys

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion


def main():
    out = sys.argv[1]
    torch.manual_seed(47)
    text = dict(
        vocab_size=16384, hidden_size=1024, intermediate_size=2048, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128, global_head_dim=256,
        num_global_key_value_heads=1, sliding_window=512, max_position_embeddings=4096,
        layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2,
        num_experts=32, top_k_experts=4, moe_intermediate_size=512, final_logit_softcapping=30.0,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    vision = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=8, patch_size=4,
                  position_embedding_size=8)
    cfg = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=64)
    model = DiffusionGemmaForBlockDiffusion(cfg).eval().to(torch.bfloat16)
    model.save_pretrained(out)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"max_denoising_steps": 8, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
                   "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
                   "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005}, f, indent=2)


if __name__ == "__main__":
    main()
