#!/usr/bin/env python3
"""Copies a Qwen3-style checkpoint (per-head k_norm) and declares a quantized KV cache on it as ModelOpt exports one.

usage: add_kv_cache_format.py SRC DST NVFP4|NVFP4_AFFINE|INT8 [IDS.jsonl]

Writes DST/hf_quant_config.json (quant_algo null, kv_cache_quant_algo FORMAT) and adds per layer
self_attn.k_proj.k_scale / v_proj.v_scale = amax / 448 (NVFP4: ModelOpt's export) or amax / 127
(INT8), amax from a transformers forward over the first 8 sequences of IDS.jsonl (default:
SRC/heldout.jsonl): K as k_norm's output × 1.25 (headroom for RoPE, which it runs before), V as
v_proj's output. NVFP4_AFFINE also gets k_bias / v_bias [1, kv_heads, 1, head_dim] = the mean of
those outputs (ModelOpt's "mean" bias). For docs/ACCURACY.md's "Declared quantized KV caches"; needs
torch, transformers and safetensors (e.g. /work/venvs/torch).
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

src, out, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
ids_file = sys.argv[4] if len(sys.argv) > 4 else os.path.join(src, "heldout.jsonl")
os.makedirs(out, exist_ok=True)
for f in os.listdir(src):
    if f != "model.safetensors":
        shutil.copy(os.path.join(src, f), out)
m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
kvh, hd = m.config.num_key_value_heads, m.config.head_dim
amax, total, count = {}, {}, {}


def hook(name):
    def f(mod, inp, o):
        x = o.detach().reshape(-1, kvh * hd)
        amax[name] = max(amax.get(name, 0.0), x.abs().max().item())
        total[name] = total.get(name, 0) + x.sum(0)
        count[name] = count.get(name, 0) + x.shape[0]
    return f


for i, layer in enumerate(m.model.layers):
    layer.self_attn.k_norm.register_forward_hook(hook(f"{i}.k"))
    layer.self_attn.v_proj.register_forward_hook(hook(f"{i}.v"))
for line in list(open(ids_file))[:8]:
    with torch.no_grad():
        m(torch.tensor([json.loads(line)]))
w = load_file(os.path.join(src, "model.safetensors"))
bound = 127.0 if fmt == "INT8" else 448.0
for i in range(len(m.model.layers)):
    p = f"model.layers.{i}.self_attn"
    w[p + ".k_proj.k_scale"] = torch.tensor(amax[f"{i}.k"] * 1.25 / bound)
    w[p + ".v_proj.v_scale"] = torch.tensor(amax[f"{i}.v"] / bound)
    if fmt == "NVFP4_AFFINE":
        for kv, name in (("k", "k_proj.k_bias"), ("v", "v_proj.v_bias")):
            mean = total[f"{i}.{kv}"] / count[f"{i}.{kv}"]
            w[f"{p}.{name}"] = mean.reshape(1, kvh, 1, hd).float().contiguous()
save_file(w, os.path.join(out, "model.safetensors"))
q = {"producer": {"name": "modelopt", "version": "0.47.0"},
     "quantization": {"quant_algo": None, "kv_cache_quant_algo": fmt}}
json.dump(q, open(os.path.join(out, "hf_quant_config.json"), "w"), indent=2)
