#!/usr/bin/env python3
"""Goldens for DeepSeek-V4 (tests/model/deepseek_v4_test.cpp): DeepseekV4ForCausalLM.

A tiny random model built by transformers 5.24 (seeded), its tensors saved under DeepSeek's native
names (the form of deepseek-ai/DeepSeek-V4-Flash and NVIDIA's NVFP4 release: embed.weight,
layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight, hc_head_fn, head.weight, ...), which
transformers reads back through its conversion mapping (checked: same logits, no missing key).

Every V4 mechanism is on and crossed by the 40-token prompt: hc_mult 4 residual streams mixed by
Sinkhorn-projected matrices at every sub-layer; sliding window 8 (shrunk from 128); layer 1 and 3
compressed sparse attention (every 4 tokens, overlapping Ca/Cb windows, a lightning indexer keeping
index_topk 3 of up to 10 entries); layer 2 heavily compressed (every 16 tokens, shrunk from 128);
layer 0 sliding only; the 32-wide shared-KV head with per-head sinks, partial interleaved RoPE (8
of 32 dims; plain theta for sliding layers, YaRN theta 160000 for compressed ones) and its inverse
rotation on the output; grouped low-rank output projection; hash-routed MoE in layers 0-1
(tid2eid), sqrtsoftplus top-k MoE with a correction bias in layers 2-3, clamped SwiGLU.

Checked here, besides writing the goldens: transformers' own incremental decode (its cache, one
token at a time) gives its one-forward logits, and every indexer top-k is clear (the index_topk-th
best score beats the next one by at least 1e-3 of the row's range). The decode agrees within 1e-5
of the logit range, not better: transformers keeps RoPE, softmaxes and mHC in float32 even in a
float64 model.

  tests/model/fixtures/deepseek_v4/{config.json,model.safetensors}
  logits.f64    float64 logits at every position of TOKENS   [len(TOKENS), vocab]
  golden.json   tokens, greedy continuation, shapes
  /work/venvs/torch/bin/python scripts/make_deepseek_v4_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import re
import shutil

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "deepseek_v4")
SEED = 4704
TOKENS = [3, 17, 42, 8, 61, 5, 29, 90, 12, 50, 7, 44, 19, 2, 58, 26, 38, 11, 63, 21,
          80, 33, 70, 4, 9, 66, 14, 31, 85, 47, 1, 52, 24, 77, 36, 6, 93, 15, 40, 28]
GREEDY_STEPS = 8

KW = dict(vocab_size=96, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=4, num_attention_heads=4,
          num_key_value_heads=1, head_dim=32, q_lora_rank=24, partial_rotary_factor=0.25, num_experts_per_tok=2,
          n_routed_experts=4, n_shared_experts=1, scoring_func="sqrtsoftplus", norm_topk_prob=True,
          routed_scaling_factor=1.5, max_position_embeddings=256, rope_theta=10000.0, compress_rope_theta=160000.0,
          layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                       "compressed_sparse_attention"],
          compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
          mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"], hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
          sliding_window=8, o_groups=2, o_lora_rank=16, index_n_heads=4, index_head_dim=16, index_topk=3,
          num_nextn_predict_layers=0, swiglu_limit=2.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                           "beta_fast": 32.0, "beta_slow": 1.0})


def build():
    torch.manual_seed(SEED)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**KW))
    # Weights large enough for the logits and index scores to spread; norms, biases, sinks and
    # position biases not all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("bias", "base", "sinks", "scale")) or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
            else:
                p.copy_(torch.randn_like(p) * 0.25)
        g = torch.Generator().manual_seed(SEED + 1)
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):  # distinct experts per token
                b.copy_(torch.stack([torch.randperm(KW["n_routed_experts"], generator=g)[:KW["num_experts_per_tok"]]
                                     for _ in range(KW["vocab_size"])]))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)
    return model.to(torch.bfloat16)


def to_native(tensors):
    """transformers 5.24 saves a half-native mix (model.layers.N.attn.*, model.embed_tokens); the
    published checkpoints have no model. prefix and DeepSeek's own top-level names."""
    out = {}
    for k, v in tensors.items():
        k = re.sub(r"^model\.", "", k)
        k = {"embed_tokens.weight": "embed.weight", "hc_head.hc_fn": "hc_head_fn",
             "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}.get(k, k)
        out[k] = v.contiguous()
    return out


class TopkRecorder:
    """Records every indexer's index scores (the tensor its topk runs on) during a forward."""

    def __init__(self, model):
        self.rows, self.active, self.orig = [], False, torch.Tensor.topk
        rec = self

        def topk(t, k, *a, **kw):
            if rec.active:
                rec.rows.append((t.detach().clone(), k))
            return rec.orig(t, k, *a, **kw)

        self.topk = topk
        for name, m in model.named_modules():
            if name.endswith("compressor.indexer"):
                m.register_forward_pre_hook(lambda *_: setattr(rec, "active", True))
                m.register_forward_hook(lambda *_: setattr(rec, "active", False))

    def __enter__(self):
        torch.Tensor.topk = self.topk
        return self

    def __exit__(self, *_):
        torch.Tensor.topk = self.orig


def check_margins(rec, k_cfg):
    worst, rows_past_budget = float("inf"), 0
    for scores, _ in rec.rows:
        for row in scores[0]:
            ok = row[torch.isfinite(row)]
            if ok.numel() <= k_cfg:
                continue
            rows_past_budget += 1
            v = torch.sort(ok, descending=True).values
            span = float(v[0] - v[-1])
            worst = min(worst, float(v[k_cfg - 1] - v[k_cfg]) / span if span > 0 else 0.0)
    assert rows_past_budget > 0, "no row selects a strict subset"
    assert worst > 1e-3, f"a top-k boundary is too close to call: relative gap {worst:.2e}"
    return worst, rows_past_budget


def load64(d):
    m, info = DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float64, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    m.set_experts_implementation("eager")  # grouped_mm has no float64
    return m.eval()


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tmp = OUT + "_hf"
    model = build()
    model.save_pretrained(tmp)
    ref = load64(tmp)
    with torch.no_grad():
        ref_logits = ref(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    save_file(to_native(load_file(os.path.join(tmp, "model.safetensors"))), os.path.join(OUT, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(tmp, "config.json"), os.path.join(OUT, "config.json"))
    shutil.rmtree(tmp)

    m = load64(OUT)
    with torch.no_grad(), TopkRecorder(m) as rec:
        logits = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    assert np.array_equal(logits, ref_logits), "the native names load differently"
    worst, past = check_margins(rec, KW["index_topk"])
    rng = logits.max() - logits.min()
    with torch.no_grad():
        out = m(input_ids=torch.tensor([TOKENS[:1]]), use_cache=True)
        cache, steps = out.cache, [out.logits[0, -1].numpy()]
        for t in TOKENS[1:]:
            out = m(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
            cache = out.cache
            steps.append(out.logits[0, -1].numpy())
        decode_diff = float(np.abs(np.stack(steps) - logits).max() / rng)
        assert decode_diff < 1e-5, f"transformers' decode differs from its forward: {decode_diff:.2e}"
        gen = m.generate(torch.tensor([TOKENS]), max_new_tokens=GREEDY_STEPS, do_sample=False)[0, len(TOKENS):].tolist()
    logits.astype("<f8").tofile(os.path.join(OUT, "logits.f64"))
    golden = {"tokens": TOKENS, "greedy": gen, "logits_cols": int(logits.shape[1]), "index_topk": KW["index_topk"],
              "indexer_rows_past_budget": past, "min_relative_topk_gap": worst, "decode_vs_forward": decode_diff,
              "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print("logit range", float(rng), "topk gap", f"{worst:.2e}", "rows past budget", past, "decode diff",
          f"{decode_diff:.2e}", "greedy", gen, "argmax", logits.argmax(-1).tolist(),
          "bytes", os.path.getsize(os.path.join(OUT, "model.safetensors")))


if __name__ == "__main__":
    main()
