#!/usr/bin/env python3
"""Goldens for MiniMax-M3's text model (tests/model/minimax_m3_test.cpp).

Two tiny random checkpoints built and saved (bf16) by transformers 5.24, seeded:

  minimax_m3/text     MiniMaxM3VLForCausalLM, saved in transformers' own names (self_attn.indexer.*,
                      mlp.gate, fused mlp.experts.gate_up_proj / down_proj, fused gate_up_proj MLPs)
  minimax_m3/wrapper  MiniMaxM3SparseForConditionalGeneration with a 1-layer vision tower, saved in
                      the published layout (language_model.model.*, block_sparse_moe.experts.E.w1/w3/w2,
                      self_attn.index_*; transformers reverses its conversion mapping on save), fed text

Each: 3 layers, layer_types [sparse, full, sparse] (the lightning indexer on layers 0 and 2),
mlp_layer_types [dense, sparse, sparse], a small selector budget so that TOKENS (24) runs past it:
text: index_block_size 2, index_topk_blocks 3, index_local_blocks 1 (dense up to 6 positions);
wrapper: block 3, topk 3, local 2 (dense up to 9). Gemma-style norms with random weights, the
e_score_correction_bias random, swiglu_limit 1.5 so that the clamps act.

  <dir>/{config.json,model.safetensors}
  <dir>/logits.f64        float64 logits at every position of TOKENS (one forward, eager attention)
  <dir>/short_logits.f64  float64 logits of SHORT (below the budget: exactly dense)
  <dir>/golden.json       the tokens, shapes, and float64 greedy continuation of PROMPT
The script also checks that transformers' own incremental decode (its DynamicCache with the
indexer's keys) gives the one-forward logits, and that the selector really drops blocks.

  /work/venvs/torch/bin/python scripts/make_minimax_m3_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import shutil

import numpy as np
import torch
from transformers import (MiniMaxM3SparseForConditionalGeneration, MiniMaxM3VLConfig, MiniMaxM3VLForCausalLM,
                          MiniMaxM3VLTextConfig)
from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as mm

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "minimax_m3")
TOKENS = [3, 17, 42, 8, 61, 5, 29, 100, 12, 50, 7, 114, 19, 2, 58, 126, 38, 11, 63, 21, 90, 33, 120, 4]
SHORT = [9, 77, 31, 4, 101]
PROMPT = [5, 88, 14, 60]
NEW_TOKENS = 12

TEXT = dict(vocab_size=128, hidden_size=32, intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rotary_dim=8, dense_intermediate_size=24, shared_intermediate_size=8,
            num_local_experts=4, num_experts_per_tok=2, routed_scaling_factor=2.5, swiglu_alpha=1.5,
            swiglu_limit=1.5, index_n_heads=2, index_head_dim=8, max_position_embeddings=64,
            layer_types=["minimax_m3_sparse", "full_attention", "minimax_m3_sparse"],
            mlp_layer_types=["dense", "sparse", "sparse"], rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
SELECTORS = {"text": dict(index_block_size=2, index_topk_blocks=3, index_local_blocks=1),
             "wrapper": dict(index_block_size=3, index_topk_blocks=3, index_local_blocks=2)}
VISION = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2)


def build(kind):
    torch.manual_seed(4747 if kind == "text" else 4748)
    text = dict(TEXT, **SELECTORS[kind])
    if kind == "text":
        model = MiniMaxM3VLForCausalLM(MiniMaxM3VLTextConfig(**text))
    else:
        model = MiniMaxM3SparseForConditionalGeneration(
            MiniMaxM3VLConfig(text_config=text, vision_config=VISION, projector_hidden_size=16))
    # Weights large enough for the logits to spread; norms (Gemma-style: 1 + w) and the routing bias
    # not zero, so that a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.3)
            elif "vision" not in name and "projector" not in name and "patch_merge" not in name:
                p.copy_(torch.randn_like(p) * 0.3)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    return model.to(torch.bfloat16)


def load64(kind, d):
    cls = MiniMaxM3VLForCausalLM if kind == "text" else MiniMaxM3SparseForConditionalGeneration
    m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
    m.set_experts_implementation("eager")  # grouped_mm has no float64
    return m


def forward64(m, toks):
    with torch.no_grad():
        return m(input_ids=torch.tensor([toks])).logits[0].numpy()


def stepwise64(m, toks):
    """transformers' own incremental decode: one token at a time through its cache."""
    rows, cache = [], None
    with torch.no_grad():
        for t in toks:
            out = m(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            rows.append(out.logits[0, -1].numpy())
    return np.stack(rows)


def count_dropped(m, toks):
    """How many (layer, query, head) selections leave out a causal block (the selector at work)."""
    dropped = []
    orig = mm.MiniMaxM3VLIndexer.forward

    def spy(self, hidden_states, position_embeddings, cache, position_ids):
        idx = orig(self, hidden_states, position_embeddings, cache, position_ids)
        causal_blocks = position_ids[0] // self.block_size + 1
        kept = (idx >= 0).sum(-1)[0]  # [heads, q]
        dropped.append(int((kept < causal_blocks[None, :]).sum()))
        return idx

    mm.MiniMaxM3VLIndexer.forward = spy
    try:
        forward64(m, toks)
    finally:
        mm.MiniMaxM3VLIndexer.forward = orig
    return sum(dropped)


def make(kind):
    out = os.path.join(OUT, kind)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    build(kind).save_pretrained(out)
    m = load64(kind, out)
    want = forward64(m, TOKENS)
    steps = stepwise64(m, TOKENS)
    # Not bit-equal: the RoPE tables are float32 (cos/sin of a longer tensor take torch's vector path).
    assert np.abs(steps - want).max() < 1e-5 * (want.max() - want.min()), np.abs(steps - want).max()
    dropped = count_dropped(m, TOKENS)
    assert dropped > 0, "the selector kept every block: the budget is not crossed"
    short = forward64(m, SHORT)
    gen, seq = [], list(PROMPT)  # greedy by hand: no logits processor, eos not special
    for _ in range(NEW_TOKENS):
        gen.append(int(forward64(m, seq)[-1].argmax()))
        seq.append(gen[-1])
    want.astype("<f8").tofile(os.path.join(out, "logits.f64"))
    short.astype("<f8").tofile(os.path.join(out, "short_logits.f64"))
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    golden = {"tokens": TOKENS, "short_tokens": SHORT, "prompt": PROMPT, "greedy": gen, "vocab": int(want.shape[1]),
              "dropped_selections": dropped, "architecture": cfg["architectures"][0],
              "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(kind, "logit range", float(want.max() - want.min()), "dropped", dropped, "greedy", gen,
          "size", os.path.getsize(os.path.join(out, "model.safetensors")))


def main():
    for kind in ("text", "wrapper"):
        make(kind)


if __name__ == "__main__":
    main()
