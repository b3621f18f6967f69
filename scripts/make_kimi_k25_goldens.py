#!/usr/bin/env python3
"""Goldens for the Kimi K2.5 wrapper's text model (tests/model/kimi_k25_test.cpp).

A tiny random Kimi_K25ForConditionalGeneration built and saved (bf16) by transformers 5.24: a
3-layer DeepSeek-V3 text model (MLA with q_lora_rank, YaRN RoPE with mscale, one dense layer then
sigmoid-routed MoE layers with grouped top-k, a shared expert and e_score_correction_bias) and a
1-block MoonViT tower with its projector, which fp4lm does not run (text input only).

transformers saves this class in the original checkpoint layout (its conversion mapping reversed:
language_model.model.*, language_model.lm_head.weight, vision_tower.encoder.*, mm_projector.proj.*),
but reverses the tower's `blocks -> layers` rename over the language model too
(language_model.model.blocks.N.*); the published checkpoints keep language_model.model.layers.N.*,
so the file is rewritten that way, and transformers is checked to read the rewritten file to the
same logits.

  tests/model/fixtures/kimi_k25/{config.json,model.safetensors}
  text_logits.f64   the float64 forward's logits at every position of TEXT_TOKENS
  golden.json       the tokens and shapes
  /work/venvs/torch/bin/python scripts/make_kimi_k25_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "kimi_k25")
TEXT_TOKENS = [3, 17, 42, 8, 61, 5, 29, 200, 12, 50, 7, 144, 19, 2, 58, 126, 38, 11, 63, 21, 90, 33, 250, 4]

TEXT = dict(model_type="kimi_k2", vocab_size=264, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
            num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
            n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
            qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=64, num_nextn_predict_layers=0,
            rms_norm_eps=1e-6, rope_interleave=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 1.0})
VISION = dict(patch_size=14, pos_emb_height=4, pos_emb_width=4, pos_emb_time=2, num_attention_heads=2,
              num_hidden_layers=1, hidden_size=16, intermediate_size=24)


def build():
    torch.manual_seed(4725)
    cfg = Kimi_K25Config(text_config=TEXT, vision_config=VISION, projection_hidden_size=16, tie_word_embeddings=False)
    model = Kimi_K25ForConditionalGeneration(cfg)
    # Weights large enough for the logits to spread; norms and biases not all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            elif "language_model" in name or "lm_head" in name:
                p.copy_(torch.randn_like(p) * 0.25)
    return model.to(torch.bfloat16)


def forward64(d):
    m = Kimi_K25ForConditionalGeneration.from_pretrained(d, dtype=torch.float64).eval()
    m.set_experts_implementation("eager")  # grouped_mm has no float64
    with torch.no_grad():
        return m(input_ids=torch.tensor([TEXT_TOKENS])).logits[0].numpy()


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    model = build()
    saved = os.path.join(OUT, "saved")
    model.save_pretrained(saved)
    want = forward64(saved)
    t = load_file(os.path.join(saved, "model.safetensors"))
    out = {k.replace("language_model.model.blocks.", "language_model.model.layers."): v for k, v in t.items()}
    assert any(k.startswith("language_model.model.layers.") for k in out), sorted(out)[:5]
    save_file(out, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(saved, "config.json"), OUT)
    shutil.rmtree(saved)
    again = forward64(OUT)
    assert np.array_equal(again, want), "the rewritten checkpoint reads differently in transformers"
    want.astype("<f8").tofile(os.path.join(OUT, "text_logits.f64"))
    with open(os.path.join(OUT, "config.json")) as f:
        cfg = json.load(f)
    golden = {"text_tokens": TEXT_TOKENS, "logits_rows": want.shape[0], "logits_cols": want.shape[1],
              "architecture": cfg["architectures"][0],
              "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print("logit range", float(want.max() - want.min()), "argmax", want.argmax(-1).tolist())


if __name__ == "__main__":
    main()
