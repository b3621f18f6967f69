#!/usr/bin/env python3
"""Writes tests/model/fixtures/phi3/: tiny random Phi3ForCausalLM checkpoints built and saved by
transformers, each with the config.json of a published model shrunk in its sizes (the published
field names and forms: top-level original_max_position_embeddings, rope_scaling with
type "longrope" and short/long factors, partial_rotary_factor, Phi-4-mini's extra keys), and
config_transformers5.json (the same config as transformers 5 saves it), and
golden.json: transformers' float64 logits at every position.

  phi3_mini_4k    microsoft/Phi-3-mini-4k-instruct: MHA, sliding_window below the context
  phi3_mini_128k  microsoft/Phi-3-mini-128k-instruct: LongRoPE
  phi4            microsoft/phi-4: GQA, rope_theta 250000, no scaling, no window
  phi4_mini       microsoft/Phi-4-mini-instruct: GQA, LongRoPE, partial_rotary_factor 0.75, tied

golden.json holds, per case: "full" (one forward of all tokens; longer than
original_max_position_embeddings, so LongRoPE uses its long factors), "short" (one forward of the
first tokens: short factors), and "cached" (a prefill below the boundary, then one token at a time
through transformers' KV cache across it: the step whose last position reaches
original_max_position_embeddings switches to the long factors, keys already cached stay as they
were rotated). Run offline with the pinned transformers/torch (not in CI):
  /work/venvs/modelopt/bin/python scripts/make_phi3_goldens.py tests/model/fixtures/phi3
"""
import json
import os
import sys

import torch
import transformers

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures/phi3"
TOKENS = [3, 17, 42, 8, 61, 5, 29, 33, 12, 50, 7, 44, 19, 2, 58, 26, 38, 11, 63, 21, 9, 47, 30, 15]
SHORT = 12    # tokens of the "short" forward
PREFILL = 14  # tokens prefilled before the cached decode

BASE = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 62, "hidden_act": "silu",
    "initializer_range": 0.02, "model_type": "phi3", "pad_token_id": 63, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True,
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
}


def factors(gen, n, lo, hi):
    return [round(lo + (hi - lo) * float(x), 4) for x in torch.rand(n, generator=gen, dtype=torch.float64)]


def cases():
    g = torch.Generator().manual_seed(47)
    mini4k = dict(BASE, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                  original_max_position_embeddings=64, rope_scaling=None, rope_theta=10000.0, sliding_window=15,
                  tie_word_embeddings=False)
    mini128k = dict(mini4k, max_position_embeddings=256, original_max_position_embeddings=16, sliding_window=1024,
                    rope_scaling={"long_factor": factors(g, 4, 1.0, 12.0), "short_factor": factors(g, 4, 1.0, 1.2),
                                  "type": "longrope"})
    phi4 = dict(BASE, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                original_max_position_embeddings=64, rope_scaling=None, rope_theta=250000.0, sliding_window=None,
                tie_word_embeddings=False, bos_token_id=60, eos_token_id=61, pad_token_id=62, vocab_size=64)
    mini = dict(BASE, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=80,
                max_position_embeddings=512, original_max_position_embeddings=16, partial_rotary_factor=0.75,
                rope_scaling={"long_factor": factors(g, 6, 1.0, 12.0), "short_factor": factors(g, 6, 1.0, 1.2),
                              "type": "longrope"},
                rope_theta=10000.0, sliding_window=1024, tie_word_embeddings=True, bos_token_id=59, eos_token_id=59,
                pad_token_id=59, full_attn_mod=1, interpolate_factor=1, lm_head_bias=False, mlp_bias=False)
    return {"phi3_mini_4k": mini4k, "phi3_mini_128k": mini128k, "phi4": phi4, "phi4_mini": mini}


def rows(t):  # 10 significant digits: far below the 1e-4 tolerance, a third of the file
    return [[float(f"{v:.10g}") for v in r] for r in t.tolist()]


def logits(model, ids):
    with torch.no_grad():
        return rows(model(torch.tensor([ids])).logits[0])


def cached(model, ids):
    out = []
    with torch.no_grad():
        r = model(torch.tensor([ids[:PREFILL]]), use_cache=True)
        out += rows(r.logits[0])
        past = r.past_key_values
        for t in ids[PREFILL:]:
            r = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = r.past_key_values
            out += rows(r.logits[0])
    return out


def main():
    torch.manual_seed(0)
    for name, published in cases().items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        cfg = transformers.Phi3Config(**{k: v for k, v in published.items() if k not in ("architectures", "model_type")})
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        with torch.no_grad():  # weights large enough for the logits to spread; norms not all ones
            for n, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.1 if "norm" in n else 0.25) + (1.0 if "norm" in n else 0.0))
        model.to(torch.bfloat16).save_pretrained(d)
        # transformers' own form (rope_parameters, ...) kept beside the published one.
        os.replace(os.path.join(d, "config.json"), os.path.join(d, "config_transformers5.json"))
        with open(os.path.join(d, "config.json"), "w") as f:  # the published form, as the hub has it
            json.dump(published, f, indent=2)
        ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
        ref.eval()
        gold = {"tokens": TOKENS, "short_tokens": SHORT, "prefill": PREFILL, "full": logits(ref, TOKENS),
                "short": logits(ref, TOKENS[:SHORT]), "cached": cached(ref, TOKENS),
                "transformers": transformers.__version__, "torch": torch.__version__}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(gold, f, separators=(",", ":"))
        for junk in ("generation_config.json",):
            if os.path.exists(os.path.join(d, junk)):
                os.remove(os.path.join(d, junk))
        print(name, "written;", sum(p.numel() for p in ref.parameters()), "params")


if __name__ == "__main__":
    main()
