#!/usr/bin/env python3
"""Compares fp4lm's logits with Hugging Face transformers' own model classes, position by position.

For every architecture fp4lm supports, this writes a tiny random checkpoint with transformers
itself (`AutoModelForCausalLM.from_config(cfg)` + `save_pretrained`, weights in bfloat16 as
published checkpoints are), then runs a fixed prompt through

  * transformers in float32 on those weights, and `fp4lm eval --dtype float32 --dump-logits`
    on the checkpoint as written ("bf16" rows);
  * `fp4lm quantize --algo W4A16_NVFP4` of it in fp4lm, and transformers in float32 on the
    dequantized NVFP4 weights (code x E4M3 block scale x global scale, decoded here in torch)
    ("W4A16_NVFP4" rows: 4-bit weights, float32 activations on both sides).

It prints one row per (architecture, weights): max |logit difference|, the same relative to the
largest |logit|, and the fraction of positions whose argmax agrees. Both sides compute in float32
on identical weights, so the differences are float32 rounding (different summation orders):
a row passes when max relative <= --tol (default 1e-4) and every argmax agrees (or the
transformers top-2 gap at a disagreeing position is below the max |difference|: a near tie).

The last column puts both float32 results against transformers run in float64 on the same
weights: fp4lm's own error next to transformers' float32 error, so a difference can be blamed.

Needs torch, transformers (5.x: qwen3_5_moe, qwen3_next), safetensors and numpy (pinned in
scripts/requirements-validate.txt; `bash scripts/validate.sh transformers` makes the venv).
Not run in CI. Exit status 0 when every row passes, 1 otherwise.
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

# Small but not degenerate: GQA, head_dim != hidden/heads where the arch allows it, 3 layers,
# a prompt longer than the GDN chunk (64) and fp4lm's eval chunk (64).
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
HYBRID = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
              linear_conv_kernel_dim=4, head_dim=32, shared_expert_intermediate_size=48,
              layer_types=["linear_attention", "full_attention", "linear_attention"],
              rope_parameters={"rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.25})

NEMOTRON_H = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=32, max_position_embeddings=512, layer_norm_epsilon=1e-5, tie_word_embeddings=False,
                  mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=16)
NEMOTRON_MOE = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                    moe_shared_expert_intermediate_size=48, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                    norm_topk_prob=True)
DS_MOE = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
              first_k_dense_replace=1, norm_topk_prob=True, num_nextn_predict_layers=0)
MLA = dict(q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
           num_key_value_heads=4)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def arch_configs():
    """(name, config class, kwargs, model class name): each with the quirks fp4lm claims to handle."""
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    out = [
        ("Llama", "LlamaConfig", dict(COMMON, rope_parameters=llama3, tie_word_embeddings=True), "LlamaForCausalLM"),
        ("Mistral", "MistralConfig", dict(COMMON, head_dim=32, rope_parameters={"rope_type": "default",
                                                                                "rope_theta": 1e6},
                                          sliding_window=None), "MistralForCausalLM"),
        # Phi-4-mini's shape: fused qkv_proj / gate_up_proj, LongRoPE over 3/4 of each head, the
        # prompt past original_max_position_embeddings (long factors).
        ("Phi3", "Phi3Config", dict(COMMON, partial_rotary_factor=0.75, original_max_position_embeddings=32,
                                    rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.05, 1.2, 1.0, 1.15],
                                                  "long_factor": [1.0, 2.0, 4.0, 6.0, 9.0, 12.0]},
                                    sliding_window=None, bos_token_id=1, eos_token_id=2, pad_token_id=0),
         "Phi3ForCausalLM"),
        ("Qwen2", "Qwen2Config", dict(COMMON, rope_parameters={"rope_type": "linear", "rope_theta": 1e6,
                                                               "factor": 2.0}, tie_word_embeddings=True),
         "Qwen2ForCausalLM"),
        ("Qwen2-MoE", "Qwen2MoeConfig", dict(COMMON, **MOE, shared_expert_intermediate_size=48, decoder_sparse_step=2,
                                             mlp_only_layers=[2], norm_topk_prob=False,
                                             rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
         "Qwen2MoeForCausalLM"),
        ("Qwen3", "Qwen3Config", dict(COMMON, head_dim=32, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 1e6}), "Qwen3ForCausalLM"),
        ("Qwen3-MoE", "Qwen3MoeConfig", dict(COMMON, **MOE, head_dim=32, norm_topk_prob=True, mlp_only_layers=[1],
                                             rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
         "Qwen3MoeForCausalLM"),
        ("Mixtral", "MixtralConfig", dict(COMMON, num_local_experts=8, num_experts_per_tok=2,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
         "MixtralForCausalLM"),
        ("Qwen3.5-MoE", "Qwen3_5MoeTextConfig", dict(COMMON, **MOE, **HYBRID), "Qwen3_5MoeForCausalLM"),
        ("Qwen3.5-MoE VL", "Qwen3_5MoeConfig", None, "Qwen3_5MoeForConditionalGeneration"),
        ("Qwen3.5 dense", "Qwen3_5TextConfig", dict(COMMON, **{k: v for k, v in HYBRID.items()
                                                              if k != "shared_expert_intermediate_size"}),
         "Qwen3_5ForCausalLM"),
        ("Qwen3.5 dense VL", "Qwen3_5Config", None, "Qwen3_5ForConditionalGeneration"),
        # Qwen3-VL: Qwen3's layers with interleaved M-RoPE over the whole head (text: plain RoPE),
        # under model.language_model.; the MoE's experts fused as transformers saves them.
        ("Qwen3-VL", "Qwen3VLConfig", None, "Qwen3VLForConditionalGeneration"),
        ("Qwen3-VL-MoE", "Qwen3VLMoeConfig", None, "Qwen3VLMoeForConditionalGeneration"),
        ("Qwen3-Next", "Qwen3NextConfig", dict(COMMON, **MOE, **HYBRID, norm_topk_prob=True, decoder_sparse_step=1,
                                               mlp_only_layers=[]), "Qwen3NextForCausalLM"),
        # Mamba-2 / attention without RoPE / relu² MLP, one mixer per layer; a prompt longer than
        # the SSD chunk (transformers' prefill runs the chunked form, fp4lm the recurrence).
        ("Nemotron-H dense", "NemotronHConfig", dict(NEMOTRON_H, hybrid_override_pattern="M*-M-"),
         "NemotronHForCausalLM"),
        # Nemotron 3's MoE layers: sigmoid routing with a (randomized) correction bias, two groups
        # of which one is chosen, routed_scaling_factor, relu² experts without a gate, the shared
        # expert; and the latent MoE of Super / Ultra (experts between fc1/fc2_latent_proj).
        ("Nemotron-H MoE", "NemotronHConfig", dict(NEMOTRON_H, **NEMOTRON_MOE, hybrid_override_pattern="ME*EM-"),
         "NemotronHForCausalLM"),
        ("Nemotron-H latent MoE", "NemotronHConfig",
         dict(NEMOTRON_H, **NEMOTRON_MOE, moe_latent_size=32, hybrid_override_pattern="ME*EM-"),
         "NemotronHForCausalLM"),
        # Gemma 3: sliding 2:1 with a window (16) well inside the prompt, query_pre_attn_scalar !=
        # head_dim, linear RoPE on the full layers, soft-capped logits, tied embeddings.
        ("Gemma3", "Gemma3TextConfig", dict(GEMMA3), "Gemma3ForCausalLM"),
        ("Gemma3 VL", "Gemma3Config", None, "Gemma3ForConditionalGeneration"),
        # Gemma 4 dense as the 31B: full layers with their own head_dim (32) and one KV head,
        # keys as values (attention_k_eq_v), proportional RoPE (partial_rotary_factor 0.25),
        # layer scalars != 1, soft-capped logits.
        ("Gemma4", "Gemma4TextConfig", dict(GEMMA4), "Gemma4ForCausalLM"),
        # Gemma 4 MoE as the 26B-A4B: the dense MLP and the MoE block side by side (router with
        # scale / per_expert_scale, 8 GELU-tanh experts, top-2), experts as transformers stores
        # them (fused 3-D gate_up_proj / down_proj).
        ("Gemma4 MoE", "Gemma4TextConfig", dict(GEMMA4, enable_moe_block=True, num_experts=8, top_k_experts=2,
                                                moe_intermediate_size=32), "Gemma4ForCausalLM"),
        # Gemma 4 as its small models (E2B / E4B): per-layer input embeddings, the last two layers reading
        # the K/V of layers 2 and 1 (num_kv_shared_layers) with double-wide MLPs.
        ("Gemma4 PLE+KV-sharing", "Gemma4TextConfig",
         dict(GEMMA4, num_hidden_layers=5, hidden_size_per_layer_input=16, vocab_size_per_layer_input=256,
              num_kv_shared_layers=2, use_double_wide_mlp=True,
              layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                           "full_attention"]), "Gemma4ForCausalLM"),
        # The DeepSeek-style MoE families: sigmoid routing with a (randomized) e_score_correction_bias.
        ("DeepSeek-V3", "DeepseekV3Config", dict(COMMON, **DS_MOE, **MLA, n_group=4, topk_group=2,
                                                 routed_scaling_factor=2.5, rope_interleave=True,
                                                 rope_parameters=YARN), "DeepseekV3ForCausalLM"),
        ("Kimi-K2-style", "DeepseekV3Config", dict(COMMON, **DS_MOE, **MLA, n_group=1, topk_group=1,
                                                   routed_scaling_factor=2.827, rope_interleave=True,
                                                   rope_parameters=dict(YARN, factor=32.0)), "DeepseekV3ForCausalLM"),
        ("DeepSeek q_proj (q_lora_rank null)", "DeepseekV3Config",
         dict(COMMON, **DS_MOE, **dict(MLA, q_lora_rank=None), n_group=2, topk_group=1, routed_scaling_factor=1.0,
              rope_interleave=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         "DeepseekV3ForCausalLM"),
        ("GLM-4.7-Flash", "Glm4MoeLiteConfig", dict(COMMON, **DS_MOE, **MLA, n_group=1, topk_group=1,
                                                    routed_scaling_factor=1.8,
                                                    rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
         "Glm4MoeLiteForCausalLM"),
        ("GLM-4.7", "Glm4MoeConfig", dict(COMMON, **DS_MOE, head_dim=32, attention_bias=True, use_qk_norm=True,
                                          n_group=1, topk_group=1, routed_scaling_factor=2.5,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                           "partial_rotary_factor": 0.5}), "Glm4MoeForCausalLM"),
        ("MiniMax-M2", "MiniMaxM2Config", dict(COMMON, head_dim=32, num_local_experts=8, num_experts_per_tok=2,
                                               intermediate_size=32,
                                               rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                                "partial_rotary_factor": 0.5}),
         "MiniMaxM2ForCausalLM"),
        # gpt-oss: attention sinks (randomized ~N(0, 1)), sliding / full layers with a window (16) well
        # inside the prompt, YaRN without truncation, q/k/v/o and router / expert biases, the
        # clamped SwiGLU with a limit the activations reach (2.0; published: 7.0). Its second row
        # writes the experts as MXFP4 blocks / scales (OpenAI's layout) and compares with
        # transformers' own MXFP4 dequantization (Mxfp4Config(dequantize=True)).
        ("gpt-oss", "GptOssConfig", dict(COMMON, head_dim=32, num_local_experts=8, num_experts_per_tok=2,
                                         intermediate_size=32, sliding_window=16, attention_bias=True,
                                         layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                         swiglu_limit=2.0,
                                         rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                                          "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                                          "original_max_position_embeddings": 16}),
         "GptOssForCausalLM"),
    ]
    return out


GEMMA3 = dict(COMMON, head_dim=32, query_pre_attn_scalar=24, sliding_window=16, tie_word_embeddings=True,
              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
              final_logit_softcapping=30.0,
              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}})


GEMMA4 = dict(COMMON, num_hidden_layers=4, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
              attention_k_eq_v=True, hidden_size_per_layer_input=0, sliding_window=16, tie_word_embeddings=True,
              layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
              final_logit_softcapping=30.0,
              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                               "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                  "rope_theta": 1e6}})


def make_config(cls_name, kwargs):
    if cls_name in ("Qwen3_5MoeConfig", "Qwen3_5Config"):  # the VL wrappers: a tiny text model + vision tower
        moe = cls_name == "Qwen3_5MoeConfig"
        text = dict(COMMON, **MOE, **HYBRID) if moe else dict(COMMON, **{k: v for k, v in HYBRID.items()
                                                                        if k != "shared_expert_intermediate_size"})
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
        return getattr(transformers, cls_name)(text_config=text, vision_config=vision, tie_word_embeddings=False)
    if cls_name in ("Qwen3VLConfig", "Qwen3VLMoeConfig"):  # a tiny text model + a vision tower with DeepStack
        rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 4, 4], "mrope_interleaved": True}
        text = dict(COMMON, head_dim=32, rope_parameters=rope)
        if cls_name == "Qwen3VLMoeConfig":
            text.update(MOE, mlp_only_layers=[1])
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                      spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                      deepstack_visual_indexes=[0])
        return getattr(transformers, cls_name)(text_config=text, vision_config=vision, tie_word_embeddings=False)
    if cls_name == "Gemma3Config":  # the VL wrapper: the text model above + a tiny SigLIP tower
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      image_size=28, patch_size=14)
        # transformers 5.24's Gemma3ForConditionalGeneration does not soft-cap its logits (its
        # Gemma3ForCausalLM does; published Gemma 3 configs set final_logit_softcapping null).
        text = dict(GEMMA3, final_logit_softcapping=None)
        return transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    return getattr(transformers, cls_name)(**kwargs)


@torch.no_grad()
def randomize(model, seed):
    """Weights that make every quirk visible: matrices ~ N(0, 1/fan_in), 1-D parameters (norms,
    biases, A_log, dt_bias) perturbed by N(0, 0.2^2) around transformers' own init, all rounded to
    bfloat16 (the dtype the checkpoint is saved in, so float32 runs see the same values)."""
    g = torch.Generator().manual_seed(seed)
    for _, p in model.named_parameters():
        if p.dim() >= 2:
            p.copy_(torch.randn(p.shape, generator=g) / max(p.shape[-1], 1) ** 0.5)
        else:
            p.add_(0.2 * torch.randn(p.shape, generator=g))
        p.copy_(p.to(torch.bfloat16).to(torch.float32))
    for name, p in model.named_parameters():  # gpt-oss's attention sinks: comparable to the scores
        if name.endswith(".sinks"):
            p.copy_((torch.randn(p.shape, generator=g)).to(torch.bfloat16).to(torch.float32))
    for name, p in model.named_parameters():  # Gemma 4's router: logits spread as a trained one's, no near ties
        if name.endswith("router.proj.weight"):
            p.mul_(8.0)
    for name, b in model.named_buffers():  # Gemma 4's per-layer output scale (a saved buffer)
        if name.endswith("layer_scalar"):
            b.copy_((0.5 + torch.rand(b.shape, generator=g)).to(torch.bfloat16).to(torch.float32))
    # The DeepSeek-style routers' selection bias is a buffer (zeros at init): make it matter.
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.copy_((0.3 * torch.randn(b.shape, generator=g)).to(torch.bfloat16).to(torch.float32))


def write_checkpoint(name, cls_name, kwargs, model_cls, out_dir, seed):
    cfg = make_config(cls_name, kwargs)
    # The plain loops (not sdpa / grouped_mm): they also run in float64.
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg).to(torch.float32).eval()
    randomize(model, seed)
    # Save a bfloat16 copy: casting the model itself would also round its float buffers (RoPE's
    # inv_freq) and so degrade the float32 reference.
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir)
    return model


def hf_logits(model, ids):
    """float32 logits, and float64 ones from a float64 copy of the same model."""
    with torch.no_grad():
        f32 = model(input_ids=torch.tensor([ids])).logits[0].to(torch.float64)
        f64 = copy.deepcopy(model).to(torch.float64)(input_ids=torch.tensor([ids])).logits[0]
    return f32, f64


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"fp4lm {cmd[1]} exited {r.returncode}: {last[0]}")
    return r


def fp4lm_logits(fp4lm, model_dir, ids, work, extra=()):
    ids_path, dump = os.path.join(work, "ids.jsonl"), os.path.join(work, "logits.jsonl")
    with open(ids_path, "w") as f:
        f.write(json.dumps(ids) + "\n")
    run([fp4lm, "eval", "--model", model_dir, "--ids", ids_path, "--dtype", "float32", "--dump-logits", dump,
         "--log-level", "warn", *extra])
    with open(dump) as f:
        row = json.loads(f.readline())
    return torch.tensor(row["logits"], dtype=torch.float64)


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def dequantize_nvfp4(packed, scale, scale_2):
    """weight [N, K/2] U8 (element 2j in the low nibble), weight_scale [N, K/16] E4M3, weight_scale_2
    F32 0-d -> float32 [N, K]: value = e2m1(code) * e4m3(block scale) * global scale."""
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).to(torch.int64)
    w = E2M1[codes]
    return w * scale.to(torch.float32).repeat_interleave(16, dim=1) * scale_2.to(torch.float32)


def dequantized_checkpoint(qdir, src_dir, out_dir):
    """A float32 checkpoint (same tensor names as the bf16 source) holding the dequantized weights of
    fp4lm's NVFP4 export, every other tensor as exported; config.json of the source."""
    files = sorted(f for f in os.listdir(qdir) if f.endswith(".safetensors"))
    tensors = {}
    for fn in files:
        with safe_open(os.path.join(qdir, fn), "pt") as f:
            for k in f.keys():
                tensors[k] = f.get_tensor(k)
    out = {}
    for k, t in tensors.items():
        if k.endswith(("weight_scale", "weight_scale_2", "input_scale")):
            continue
        base = k[: -len(".weight")] if k.endswith(".weight") else None
        if base is not None and base + ".weight_scale" in tensors:
            out[k] = dequantize_nvfp4(t, tensors[base + ".weight_scale"], tensors[base + ".weight_scale_2"])
        else:
            out[k] = t.to(torch.float32)
    with open(os.path.join(src_dir, "config.json")) as f:
        if json.load(f).get("model_type", "").startswith(("gemma4", "qwen3_vl_moe")):
            out = fuse_experts(out)
    os.makedirs(out_dir, exist_ok=True)
    save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(src_dir, "config.json"), os.path.join(out_dir, "config.json"))
    return sum(1 for k in tensors if k.endswith(".weight_scale"))


def fuse_experts(tensors):
    """Per-expert `<box>.<e>.{gate,up,down}_proj.weight` (ModelOpt's and fp4lm's export) back into the 3-D
    parameters transformers' Gemma 4 and Qwen3-VL-MoE load without a conversion: `<box>.gate_up_proj` [E, 2I, D] (gate rows
    first) and `<box>.down_proj` [E, D, I]."""
    pat = re.compile(r"^(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
    boxes, out = {}, {}
    for k, t in tensors.items():
        m = pat.match(k)
        if m:
            boxes.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
        else:
            out[k] = t
    for box, parts in boxes.items():
        n = 1 + max(e for e, _ in parts)
        out[box + ".gate_up_proj"] = torch.stack([torch.cat([parts[(e, "gate")], parts[(e, "up")]]) for e in range(n)])
        out[box + ".down_proj"] = torch.stack([parts[(e, "down")] for e in range(n)])
    return out


def quantize_mxfp4(w):
    """[..., N, K] float -> (blocks U8 [..., N, K/32, 16], scales U8 [..., N, K/32]): per 32 weights the
    power of two 2^e with amax <= 6 * 2^e (E8M0 byte e + 127), codes the nearest E2M1 values of w / 2^e
    (element 2j in the low nibble), as OpenAI's gpt-oss checkpoints store them."""
    *lead, n, k = w.shape
    g = w.reshape(*lead, n, k // 32, 32).to(torch.float32)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp(min=2.0 ** -100)
    e = torch.ceil(torch.log2(amax / 6.0))
    q = g / torch.exp2(e)
    codes = (q.abs().unsqueeze(-1) - E2M1[:8]).abs().argmin(dim=-1)  # magnitude code 0..7
    codes = codes + 8 * (q < 0).to(codes.dtype) * (codes > 0).to(codes.dtype)
    codes = codes.to(torch.uint8).reshape(*lead, n, k // 32, 16, 2)
    blocks = codes[..., 0] | (codes[..., 1] << 4)
    return blocks.contiguous(), (e.squeeze(-1) + 127).to(torch.uint8).contiguous()


def mxfp4_checkpoint(src_dir, out_dir):
    """gpt-oss's bf16 experts (input-major [E, in, out]) as MXFP4 `*_blocks` / `*_scales` ([E, out, ...]),
    everything else as saved; config.json with quantization_config mxfp4."""
    tensors = {}
    for fn in sorted(f for f in os.listdir(src_dir) if f.endswith(".safetensors")):
        with safe_open(os.path.join(src_dir, fn), "pt") as f:
            for k in f.keys():
                tensors[k] = f.get_tensor(k)
    out = {}
    for k, t in tensors.items():
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[k + "_blocks"], out[k + "_scales"] = quantize_mxfp4(t.transpose(-1, -2))
        else:
            out[k] = t
    os.makedirs(out_dir, exist_ok=True)
    save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return sum(1 for k in out if k.endswith("_blocks"))


def compare(ref, got, tol):
    diff = (ref - got).abs()
    max_abs = diff.max().item()
    rel = max_abs / ref.abs().max().item()
    top2 = ref.topk(2, dim=-1).values
    agree = ref.argmax(-1) == got.argmax(-1)
    near_tie = (top2[:, 0] - top2[:, 1]) <= max_abs
    ok = rel <= tol and bool((agree | near_tie).all())
    return max_abs, rel, agree.float().mean().item(), ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp4lm", default=os.path.join(os.path.dirname(__file__), "..", "build", "fp4lm"))
    ap.add_argument("--work", help="keep checkpoints and dumps here (default: a temporary directory)")
    ap.add_argument("--only", nargs="*", help="architecture names (first column) to run")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |diff| / max |logit| (float32 rounding)")
    ap.add_argument("--prompt-len", type=int, default=80)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--skip-quantized", action="store_true")
    args = ap.parse_args()
    fp4lm = os.path.abspath(args.fp4lm)
    work = args.work or tempfile.mkdtemp(prefix="fp4lm-validate-")
    os.makedirs(work, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, COMMON["vocab_size"], (args.prompt_len,), generator=g).tolist()

    print(f"torch {torch.__version__}, transformers {transformers.__version__}; fp4lm {fp4lm}; "
          f"prompt of {len(ids)} tokens; tolerance: max relative <= {args.tol:g}, argmax agreeing")
    rows, failed = [], False
    for name, cls_name, kwargs, model_cls in arch_configs():
        if args.only and name not in args.only:
            continue
        d = os.path.join(work, name.replace(" ", "_").replace(".", "_"))
        if not hasattr(transformers, model_cls):
            rows.append((name, "-", f"transformers {transformers.__version__} has no {model_cls}"))
            continue
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        src = os.path.join(d, "bf16")
        try:
            model = write_checkpoint(name, cls_name, kwargs, model_cls, src, args.seed)
            ref, ref64 = hf_logits(model, ids)
        except Exception as e:  # transformers cannot build it on CPU: say so
            rows.append((name, "-", f"transformers: {type(e).__name__}: {e}"))
            failed = True
            continue
        variants = [("bf16", src)]
        if model_cls == "GptOssForCausalLM":  # the experts as published: MXFP4 (fp4lm quantize does not export it)
            variants.append(("MXFP4", None))
        elif not args.skip_quantized:
            variants.append(("W4A16_NVFP4", None))
        for label, model_dir in variants:
            try:
                if label == "W4A16_NVFP4":
                    qdir, ddir = os.path.join(d, "w4a16"), os.path.join(d, "dequant")
                    run([fp4lm, "quantize", "--model", src, "--out", qdir, "--algo", "W4A16_NVFP4", "--force",
                         "--log-level", "warn"])
                    nq = dequantized_checkpoint(qdir, src, ddir)
                    dq = getattr(transformers, model_cls).from_pretrained(ddir, dtype=torch.float32,
                                                                          attn_implementation="eager",
                                                                          experts_implementation="eager").eval()
                    r, r64 = hf_logits(dq, ids)
                    got = fp4lm_logits(fp4lm, qdir, ids, d)
                    label = f"W4A16_NVFP4 ({nq} layers)"
                elif label == "MXFP4":
                    mdir = os.path.join(d, "mxfp4")
                    nq = mxfp4_checkpoint(src, mdir)
                    dq = getattr(transformers, model_cls).from_pretrained(
                        mdir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
                        quantization_config=transformers.Mxfp4Config(dequantize=True)).eval()
                    r, r64 = hf_logits(dq, ids)
                    got = fp4lm_logits(fp4lm, mdir, ids, d)
                    label = f"MXFP4 experts ({nq} tensors)"
                else:
                    got = fp4lm_logits(fp4lm, model_dir, ids, d)
                    r, r64 = ref, ref64
            except Exception as e:
                msg = str(e)
                unsupported = "unsupported architecture" in msg
                rows.append((name, label, "not supported by fp4lm" if unsupported else "ERROR: " + msg))
                failed = failed or not unsupported
                continue
            max_abs, rel, agree, ok = compare(r, got, args.tol)
            scale = r64.abs().max().item()
            vs64 = (f"{(got - r64).abs().max().item() / scale:.2g} / "
                    f"{(r - r64).abs().max().item() / scale:.2g}")
            failed = failed or not ok
            rows.append((name, label, f"{max_abs:.3g}", f"{rel:.3g}", f"{agree * 100:.1f}%", vs64,
                         "ok" if ok else "FAIL"))
    print()
    print("| architecture | weights | max abs diff | max relative | argmax agree "
          "| vs float64: fp4lm / transformers | result |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |" + " |" * (7 - len(r)))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
