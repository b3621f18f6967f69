#!/usr/bin/env python3
"""Goldens for Qwen3.8-Flash-Next, transformers' qwen4_exp (tests/model/qwen4_exp_test.cpp).

Two tiny random checkpoints built and saved (bf16) by transformers 5.24, seeded:

  qwen4_exp/text     Qwen4ExpForCausalLM (model.layers.*, lm_head)
  qwen4_exp/wrapper  Qwen4ExpForConditionalGeneration with a 1-layer vision tower (model.language_model.*,
                     model.visual.*), fed text

Each: 4 layers [linear, indexed, linear, indexed] (gated delta-net / gated attention with the QSA
indexer), hc_count 3 hyper-connection streams, PLE n-gram embeddings on layers 1 and 3 (one-indexed),
a shared-expert MoE in every layer. The selector's budget is small (indexer_budget 4 tokens in
blocks of indexer_compress_ratio 2: two blocks) so that TOKENS (24) runs past it from position 5 on;
TOKENS holds eos (2) twice so that the n-gram hashes restart inside it. The text fixture's linear
attention gates with sigmoid (output_gate_type), the wrapper's with silu (hidden_act).

  <dir>/{config.json,model.safetensors}
  <dir>/logits.f64        float64 logits at every position of TOKENS (one forward, eager attention)
  <dir>/short_logits.f64  float64 logits of SHORT (below the budget)
  <dir>/golden.json       the tokens, shapes, and float64 greedy continuation of PROMPT
The script also checks that transformers' own incremental decode (its cache: GDN / PLE conv and
recurrent states, the n-gram context, the indexer's keys) gives the one-forward logits, and that
the selector really drops blocks.

  /work/venvs/torch/bin/python scripts/make_qwen4_exp_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import shutil

import numpy as np
import torch
from transformers import Qwen4ExpConfig, Qwen4ExpForCausalLM, Qwen4ExpForConditionalGeneration, Qwen4ExpTextConfig
from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "qwen4_exp")
TOKENS = [3, 17, 42, 8, 61, 5, 29, 100, 2, 12, 50, 7, 114, 19, 58, 126, 2, 38, 11, 63, 21, 90, 33, 120]
SHORT = [9, 77, 2, 4]
PROMPT = [5, 88, 14, 60]
NEW_TOKENS = 10

TEXT = dict(vocab_size=128, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, hidden_act="silu", max_position_embeddings=64, rms_norm_eps=1e-6,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
            linear_num_value_heads=4, moe_intermediate_size=16, shared_expert_intermediate_size=16,
            num_experts_per_tok=2, num_experts=4, norm_topk_prob=True, hc_count=3, hc_lowrank=8,
            ple_layer_ids=[1, 3], ple_embed_dim=16, ple_conv_kernel_size=3, ngram_size=3, heads_per_ngram=2,
            ngram_vocab_size_base=29, make_ngram_vocab_size_divisible_by=8, seed=1234, split_ngram_parts=2,
            indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=4, indexer_compress_ratio=2,
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True})
VISION = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, patch_size=8, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16)


def build(kind):
    torch.manual_seed(4757 if kind == "text" else 4758)
    text = dict(TEXT, output_gate_type="sigmoid") if kind == "text" else dict(TEXT)
    if kind == "text":
        model = Qwen4ExpForCausalLM(Qwen4ExpTextConfig(**text))
    else:
        model = Qwen4ExpForConditionalGeneration(Qwen4ExpConfig(text_config=text, vision_config=VISION))
    # Weights large enough for the logits to spread; the (1 + w) norms and the PLE conv (zero at
    # init) random, so that a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("A_log"):
                p.copy_(torch.rand_like(p) * 2 - 1)
            else:
                p.copy_(torch.randn_like(p) * 0.3)
    return model.to(torch.bfloat16)


def load64(kind, d):
    cls = Qwen4ExpForCausalLM if kind == "text" else Qwen4ExpForConditionalGeneration
    m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
    m.set_experts_implementation("eager")  # grouped_mm has no float64
    return m


def forward64(m, toks):
    with torch.no_grad():
        return m(input_ids=torch.tensor([toks]), use_cache=False).logits[0].numpy()


def stepwise64(m, toks, prefill):
    """transformers' own incremental decode: a prefill, then one token at a time through its cache."""
    rows = []
    with torch.no_grad():
        out = m(input_ids=torch.tensor([toks[:prefill]]), use_cache=True)
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        rows.extend(out.logits[0].numpy())
        for t in toks[prefill:]:
            out = m(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            rows.append(out.logits[0, -1].numpy())
    return np.stack(rows)


def count_dropped(m, toks):
    """How many (layer, query) selections leave out a visible token (the selector at work)."""
    dropped = []
    orig = mq.Qwen4ExpTextQSAIndexer.forward

    def spy(self, hidden_states, position_embeddings, attention_mask, cache):
        sel = orig(self, hidden_states, position_embeddings, attention_mask, cache)
        visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        dropped.append(int((visible & ~sel).any(-1).sum()))
        return sel

    mq.Qwen4ExpTextQSAIndexer.forward = spy
    try:
        forward64(m, toks)
    finally:
        mq.Qwen4ExpTextQSAIndexer.forward = orig
    return sum(dropped)


def make(kind):
    out = os.path.join(OUT, kind)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    build(kind).save_pretrained(out)
    m = load64(kind, out)
    want = forward64(m, TOKENS)
    for prefill in (1, 4):
        steps = stepwise64(m, TOKENS, prefill)
        err = np.abs(steps - want).max()
        assert err < 1e-5 * (want.max() - want.min()), (prefill, err)
    dropped = count_dropped(m, TOKENS)
    assert dropped > 0, "the selector kept every token: the budget is not crossed"
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


if __name__ == "__main__":
    for k in ("text", "wrapper"):
        make(k)
