#!/usr/bin/env python3
"""Goldens for DeepSeek Sparse Attention (tests/model/dsa_test.cpp): DeepSeek-V3.2
(DeepseekV32ForCausalLM) and GLM-5 (GlmMoeDsaForCausalLM).

Tiny random models built and saved (bf16) by transformers 5.24: DeepSeek-V3's MLA (q_lora_rank,
YaRN with mscale / mscale_all_dim that differ, so the rotary cos/sin carry an attention factor)
plus the "lightning" indexer (wq_b on the query latent, wk + LayerNorm k_norm, RoPE on its first
qk_rope_head_dim dims: half-split in DeepSeek-V3.2, interleaved in GLM-5, ReLU scores weighted by
weights_proj and summed over the indexer heads) that keeps each query's index_topk best past
positions. index_topk is small (5, 6) and the prompt long (24 tokens), so most positions attend to
a strict subset of their past; a 4-token prompt stays below the budget (dense). GLM-5 also shares
selections: its indexer_types alternate full / shared (index_topk_freq 2, index_skip_topk_offset 1),
a shared layer reusing the previous full layer's top-k and having no indexer of its own.

The DeepSeek-V3.2 checkpoint also carries a multi-token-prediction layer (num_nextn_predict_layers
1: model.layers.3.*, tiny random tensors) that transformers ignores and fp4lm skips.

Checked here, besides writing the goldens: transformers' own incremental decode (its cache, one
token at a time) gives its one-forward logits (within 1e-6 of their range: its router logits and
index scores are float32 even in a float64 model), and every query's top-k is clear
(the index_topk-th best score beats the next one by at least 1e-3 of that row's score range), so
float32 rounding cannot change which positions are selected.

  tests/model/fixtures/dsa/<name>/{config.json,model.safetensors}
  logits.f64         float64 logits at every position of TOKENS          [len(TOKENS), vocab]
  short_logits.f64   the same for SHORT (below the budget)               [len(SHORT), vocab]
  golden.json        tokens, shapes, each row's number of selected positions per indexer layer
  /work/venvs/torch/bin/python scripts/make_dsa_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV32Config, DeepseekV32ForCausalLM, GlmMoeDsaConfig, GlmMoeDsaForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "dsa")
TOKENS = [3, 17, 42, 8, 61, 5, 29, 200, 12, 50, 7, 144, 19, 2, 58, 126, 38, 11, 63, 21, 90, 33, 250, 4]
SHORT = [77, 9, 140, 31]

COMMON = dict(vocab_size=264, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_attention_heads=2,
              num_key_value_heads=2, n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
              first_k_dense_replace=1, norm_topk_prob=True, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
              qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=64, index_n_heads=8, index_head_dim=16,
              tie_word_embeddings=False)

MODELS = {
    "deepseek_v32": (DeepseekV32Config, DeepseekV32ForCausalLM, 4733, dict(
        COMMON, num_hidden_layers=3, n_group=2, topk_group=1, routed_scaling_factor=2.5, index_topk=5,
        rms_norm_eps=1e-6, num_nextn_predict_layers=1,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 0.8})),
    "glm_moe_dsa": (GlmMoeDsaConfig, GlmMoeDsaForCausalLM, 5048, dict(
        COMMON, num_hidden_layers=4, routed_scaling_factor=1.5, index_topk=6, index_topk_freq=2,
        index_skip_topk_offset=1, num_nextn_predict_layers=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}


def build(cfg_cls, model_cls, seed, kw):
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**kw))
    # Weights large enough for the logits (and the index scores) to spread; norms and biases not
    # all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.copy_(torch.randn_like(p) * 0.25)
    return model.to(torch.bfloat16)


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
            if name.endswith("self_attn.indexer"):
                m.register_forward_pre_hook(lambda *_: setattr(rec, "active", True))
                m.register_forward_hook(lambda *_: setattr(rec, "active", False))

    def __enter__(self):
        torch.Tensor.topk = self.topk
        return self

    def __exit__(self, *_):
        torch.Tensor.topk = self.orig


def check_margins(rec, k_cfg):
    """Every row's top-k is clear; returns the selected counts per indexer call and row."""
    counts, worst = [], float("inf")
    for scores, k in rec.rows:
        s = scores[0]  # [S, T]
        layer_counts = []
        for row in s:
            causal = row[row > -1e300]  # the masked positions hold finfo.min (+ a score)
            layer_counts.append(min(k_cfg, causal.numel()))
            if causal.numel() <= k_cfg:
                continue
            v = torch.sort(causal, descending=True).values
            gap = float(v[k_cfg - 1] - v[k_cfg]) / float(v[0] - v[-1])
            worst = min(worst, gap)
        counts.append(layer_counts)
    assert worst > 1e-3, f"a top-k boundary is too close to call: relative gap {worst:.2e}"
    return counts, worst


def forward64(model_cls, d, toks):
    m = model_cls.from_pretrained(d, dtype=torch.float64).eval()
    m.set_experts_implementation("eager")  # grouped_mm has no float64
    with torch.no_grad(), TopkRecorder(m) as rec:
        logits = m(input_ids=torch.tensor([toks])).logits[0].numpy()
    # Its incremental decode, one token at a time through its cache, gives the same logits.
    with torch.no_grad():
        out = m(input_ids=torch.tensor([toks[:1]]), use_cache=True)
        cache, steps = out.cache, [out.logits[0, -1].numpy()]
        for t in toks[1:]:
            out = m(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
            cache = out.cache
            steps.append(out.logits[0, -1].numpy())
    # Not bit for bit: the router's logits and the index scores are float32 in transformers
    # whatever the model's dtype, and a step's float32 products sum in another order.
    diff = np.abs(np.stack(steps) - logits).max() / (logits.max() - logits.min())
    assert diff < 1e-6, f"transformers' decode differs from its forward: {diff:.2e}"
    return logits, rec


def add_mtp_layer(tensors, n_layers, hidden):
    """num_nextn_predict_layers 1: model.layers.<n>.* (a few of the MTP layer's tensors)."""
    g = torch.Generator().manual_seed(61)
    p = f"model.layers.{n_layers}."
    for name, shape in [("enorm.weight", [hidden]), ("hnorm.weight", [hidden]), ("eh_proj.weight", [hidden, 2 * hidden]),
                        ("input_layernorm.weight", [hidden]), ("self_attn.q_a_proj.weight", [24, hidden]),
                        ("shared_head.norm.weight", [hidden])]:
        tensors[p + name] = torch.randn(shape, generator=g).to(torch.bfloat16)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    for name, (cfg_cls, model_cls, seed, kw) in MODELS.items():
        out = os.path.join(OUT, name)
        os.makedirs(out)
        model = build(cfg_cls, model_cls, seed, kw)
        model.save_pretrained(out)
        for f in os.listdir(out):
            if f not in ("config.json", "model.safetensors"):
                os.remove(os.path.join(out, f))
        want, rec = forward64(model_cls, out, TOKENS)
        short, _ = forward64(model_cls, out, SHORT)
        counts, worst = check_margins(rec, kw["index_topk"])
        if kw.get("num_nextn_predict_layers"):
            t = load_file(os.path.join(out, "model.safetensors"))
            add_mtp_layer(t, kw["num_hidden_layers"], kw["hidden_size"])
            save_file(t, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
            again, _ = forward64(model_cls, out, TOKENS)
            assert np.array_equal(again, want), "transformers reads the MTP layer"
        want.astype("<f8").tofile(os.path.join(out, "logits.f64"))
        short.astype("<f8").tofile(os.path.join(out, "short_logits.f64"))
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        golden = {"tokens": TOKENS, "short_tokens": SHORT, "logits_cols": int(want.shape[1]),
                  "architecture": cfg["architectures"][0], "index_topk": kw["index_topk"],
                  "indexer_types": cfg.get("indexer_types"), "selected_per_row": counts,
                  "min_relative_topk_gap": worst, "transformers": __import__("transformers").__version__,
                  "torch": torch.__version__}
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        print(name, "logit range", float(want.max() - want.min()), "topk gap", f"{worst:.2e}",
              "argmax", want.argmax(-1).tolist(), "bytes", os.path.getsize(os.path.join(out, "model.safetensors")))


if __name__ == "__main__":
    main()
