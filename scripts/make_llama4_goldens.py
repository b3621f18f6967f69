#!/usr/bin/env python3
"""Writes tests/model/fixtures/llama4/: tiny random Llama 4 checkpoints built and saved by
transformers, and golden.json: transformers' float64 logits at every position.

  scout     Llama4ForCausalLM, Scout's text model shrunk: L2 qk norm, rope_scaling llama3, the
            default NoPE layer every 4th (layer 3), MoE interleaved with dense layers
            (interleave_moe_layer_step 2), top-1 sigmoid routing with a shared expert
  maverick  Llama4ForConditionalGeneration with a tiny vision tower (fed text only), Maverick's
            text model shrunk: no qk norm, no rope scaling, interleave_moe_layer_step 2, an explicit
            no_rope_layers list with a NoPE dense layer

Both: attention_chunk_size 6 (24 tokens cross four chunks), floor_scale 4 (the NoPE temperature
changes every 4 positions), GQA. golden.json holds "full" (one forward of all tokens) and
"cached" (a prefill of PREFILL tokens, then one token at a time through transformers' cache,
whose chunked layers keep a sliding window of the chunk). Run offline with the pinned
transformers/torch (not in CI):
  /work/venvs/modelopt/bin/python scripts/make_llama4_goldens.py tests/model/fixtures/llama4
"""
import json
import os
import sys

import torch
import transformers

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures/llama4"
TOKENS = [3, 17, 42, 8, 61, 5, 29, 33, 12, 50, 7, 44, 19, 2, 58, 26, 38, 11, 63, 21, 9, 47, 30, 15]
PREFILL = 10

TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=24, intermediate_size_mlp=40, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
            num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=6,
            attn_temperature_tuning=True, floor_scale=4, attn_scale=0.1, rms_norm_eps=1e-5, bos_token_id=1,
            eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def cases():
    scout = dict(TEXT, use_qk_norm=True,
                 rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8})
    maverick = dict(TEXT, use_qk_norm=False, no_rope_layers=[1, 1, 0, 1],
                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    vision = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                  vision_output_dim=16, image_size=28, patch_size=14, projector_input_dim=16,
                  projector_output_dim=16, pixel_shuffle_ratio=0.5)
    return {
        "scout": (transformers.Llama4TextConfig(**scout), transformers.Llama4ForCausalLM),
        "maverick": (transformers.Llama4Config(text_config=maverick, vision_config=vision,
                                               image_token_index=60, boi_token_index=61, eoi_token_index=62),
                     transformers.Llama4ForConditionalGeneration),
    }


def rows(t):  # 10 significant digits: far below the 1e-4 tolerance
    return [[float(f"{v:.10g}") for v in r] for r in t.tolist()]


def logits(model, ids):
    with torch.no_grad():
        return rows(model(input_ids=torch.tensor([ids])).logits[0])


def cached(model, ids):
    out = []
    with torch.no_grad():
        r = model(input_ids=torch.tensor([ids[:PREFILL]]), use_cache=True)
        out += rows(r.logits[0])
        past = r.past_key_values
        for t in ids[PREFILL:]:
            r = model(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = r.past_key_values
            out += rows(r.logits[0])
    return out


def main():
    torch.manual_seed(0)
    for name, (cfg, cls) in cases().items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        model = cls._from_config(cfg, attn_implementation="eager")
        with torch.no_grad():  # weights large enough for the logits to spread; norms not all ones
            for n, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.1 if "norm" in n else 0.25) + (1.0 if "norm" in n else 0.0))
        model.to(torch.bfloat16).save_pretrained(d)
        ref = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
        ref.eval()
        # Llama4ForConditionalGeneration.forward fails on text alone in transformers 5.24 (it reads
        # image_outputs from its language model's output); its language model is what it runs on text.
        if hasattr(ref, "vision_model"):
            ref = ref.language_model
        full = logits(ref, TOKENS)
        gold = {"tokens": TOKENS, "prefill": PREFILL, "full": full, "cached": cached(ref, TOKENS),
                "transformers": transformers.__version__, "torch": torch.__version__}
        diff = max(abs(a - b) for ra, rb in zip(full, gold["cached"]) for a, b in zip(ra, rb))
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(gold, f, separators=(",", ":"))
        for junk in ("generation_config.json",):
            if os.path.exists(os.path.join(d, junk)):
                os.remove(os.path.join(d, junk))
        print(name, "written;", sum(p.numel() for p in ref.parameters()), "params; full vs cached max diff", diff)


if __name__ == "__main__":
    main()
