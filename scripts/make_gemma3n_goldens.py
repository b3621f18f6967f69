#!/usr/bin/env python3
"""Goldens for Gemma 3n's text model (tests/model/gemma3n_test.cpp): Gemma3nForCausalLM and the
language model of Gemma3nForConditionalGeneration, fed text.

Tiny random models built by transformers 5.24 (seeded), saved with save_pretrained. Every Gemma 3n
text mechanism is on and crossed by the 40-token prompt: 4 AltUp streams (predict / correct, the
active stream 1 in the CausalLM fixture, 0 in the other), Laurel (rank 4), per-layer embeddings
(8 per layer, a per-layer table of 224 rows: ids 224.. look up row 0), the Gaussian top-k on the
gate of layers 0, 1 and 3 (activation_sparsity_pattern 0.95), per-layer intermediate sizes,
sliding window 8 on 4 of 6 layers, the last 2 layers reading the K/V of layers 3 and 2
(num_kv_shared_layers), final_logit_softcapping 30.

Gemma3nForConditionalGeneration: transformers builds its vision tower with timm (MobileNetV5),
which is not installed here; the script stands a one-convolution module in for it (fp4lm never
runs the towers: their tensors are on the ignore list). The audio tower is transformers' own, tiny.
The prompt holds ids of the embed_vision (224..239) and embed_audio (240..255) "hard" token ranges,
which that class embeds through those embedders, not the text table.

Checked here, besides writing the goldens: transformers' own decode (its cache, one token at a time,
and prefill 13 + decode) gives its one-forward logits.

  tests/model/fixtures/gemma3n/{causal,conditional}/{config.json,model.safetensors}
  logits.f64    float64 logits at every position of TOKENS   [len(TOKENS), vocab]
  golden.json   tokens, greedy continuation, shapes
  /work/venvs/torch/bin/python scripts/make_gemma3n_goldens.py   (transformers 5.24.0, torch)
"""
import json
import os
import shutil

import numpy as np
import torch
from torch import nn
from transformers import (Gemma3nAudioConfig, Gemma3nConfig, Gemma3nForCausalLM, Gemma3nForConditionalGeneration,
                          Gemma3nTextConfig, Gemma3nVisionConfig)
from transformers.models.gemma3n import modeling_gemma3n

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "gemma3n")
SEED = 4747
TOKENS = [2, 17, 42, 8, 61, 5, 29, 90, 12, 230, 7, 44, 19, 3, 58, 26, 250, 11, 63, 21,
          80, 33, 70, 4, 9, 66, 14, 31, 85, 47, 1, 52, 24, 77, 36, 6, 93, 15, 40, 28]
GREEDY_STEPS = 8
HALF = 13

TEXT = dict(vocab_size=256, vocab_size_per_layer_input=224, hidden_size=32, intermediate_size=[48, 64, 48, 64, 48, 64],
            num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                         "sliding_attention", "full_attention"],
            sliding_window=8, max_position_embeddings=256, hidden_size_per_layer_input=8, altup_num_inputs=4,
            altup_coef_clip=120.0, altup_correct_scale=True, num_kv_shared_layers=2, laurel_rank=4,
            activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.95, 0.0, 0.0], final_logit_softcapping=30.0,
            rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=2, eos_token_id=1)


class StandInVisionTower(nn.Module):
    """timm's MobileNetV5 stand-in (no timm here): never run on text."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)


_from_config = modeling_gemma3n.AutoModel.from_config


def _patched_from_config(config, *a, **kw):
    if isinstance(config, Gemma3nVisionConfig):
        return StandInVisionTower()
    return _from_config(config, *a, **kw)


modeling_gemma3n.AutoModel.from_config = _patched_from_config


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("correct_output_scale"):
                p.copy_(1.0 + torch.randn_like(p) * 0.3)
            elif "coefs" in name:
                p.copy_(torch.randn_like(p) * 0.3)
            else:
                p.copy_(torch.randn_like(p) * 0.25)


def build(kind):
    torch.manual_seed(SEED + (kind == "conditional"))
    if kind == "causal":
        model = Gemma3nForCausalLM(Gemma3nTextConfig(**TEXT, altup_active_idx=1))
    else:
        vision = Gemma3nVisionConfig(hidden_size=16, vocab_size=16, vocab_offset=224, label_names=["x"])
        audio = Gemma3nAudioConfig(vocab_size=16, vocab_offset=240, input_feat_size=8, hidden_size=16,
                                   conf_num_attention_heads=2, conf_num_hidden_layers=1, sscp_conv_channel_size=[4, 4],
                                   conf_attention_chunk_size=4, conf_attention_context_left=5)
        cfg = Gemma3nConfig(text_config=Gemma3nTextConfig(**TEXT, altup_active_idx=0), vision_config=vision,
                            audio_config=audio, boi_token_id=220, eoi_token_id=224, image_token_id=225,
                            boa_token_id=221, eoa_token_id=240, audio_token_id=241)
        model = Gemma3nForConditionalGeneration(cfg)
    randomize(model)
    return model.to(torch.bfloat16)


def load64(cls, d):
    m, info = cls.from_pretrained(d, dtype=torch.float64, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return m.eval()


def run(kind):
    cls = Gemma3nForCausalLM if kind == "causal" else Gemma3nForConditionalGeneration
    out = os.path.join(OUT, kind)
    shutil.rmtree(out, ignore_errors=True)
    build(kind).save_pretrained(out)
    m = load64(cls, out)
    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        logits = m(input_ids=ids).logits[0].numpy()
        rng = logits.max() - logits.min()
        # transformers' decode: one token at a time, and prefill HALF + decode.
        worst = 0.0
        for first in (1, HALF):
            o = m(input_ids=ids[:, :first], use_cache=True)
            cache, steps = o.cache, [o.logits[0]]
            for t in TOKENS[first:]:
                o = m(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
                cache = o.cache
                steps.append(o.logits[0])
            got = torch.cat(steps).numpy()
            worst = max(worst, float(np.abs(got - logits).max() / rng))
        assert worst < 1e-5, f"transformers' decode differs from its forward: {worst:.2e}"
        gen = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY_STEPS, do_sample=False,
                         min_new_tokens=GREEDY_STEPS)[0, len(TOKENS):].tolist()
    logits.astype("<f8").tofile(os.path.join(out, "logits.f64"))
    for f in os.listdir(out):  # generation_config.json: not read by the test
        if f not in ("config.json", "model.safetensors", "logits.f64"):
            os.remove(os.path.join(out, f))
    golden = {"tokens": TOKENS, "greedy": gen, "logits_cols": int(logits.shape[1]), "decode_vs_forward": worst,
              "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(kind, "logit range", float(rng), "decode diff", f"{worst:.2e}", "greedy", gen, "argmax",
          logits.argmax(-1).tolist(), "bytes", os.path.getsize(os.path.join(out, "model.safetensors")))


def main():
    os.makedirs(OUT, exist_ok=True)
    for kind in ("causal", "conditional"):
        run(kind)


if __name__ == "__main__":
    main()
