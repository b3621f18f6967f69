#!/usr/bin/env python3
"""Goldens for DiffusionGemma (DiffusionGemmaForBlockDiffusion, transformers 5.24).

Builds a tiny random model with transformers (seeded), saves it with save_pretrained into
tests/model/fixtures/diffusion_gemma/tiny/ with a generation_config.json, and writes:
  expected_encoder_logits.f64   float64 [P, V]: lm_head(encoder(prompt)) softcapped, the causal encoder
  expected_decoder_logits.f64   float64 [C, V]: the decoder's logits for a fixed canvas after the prompt,
                                without self-conditioning
  expected_decoder_sc_logits.f64 float64 [C, V]: the same canvas with the first logits as
                                self-conditioning input
  goldens.json                  the prompt, the canvas, and generate()'s output ids per case
The decoder cases use a prompt longer than the sliding window, so the sliding layers' cache is cut.

Generation is made deterministic as fp4lm's `--temperature 0` rule is defined: the canvas starts as
(and positions not accepted reset to) the pad token, and the denoiser takes the argmax instead of
torch.multinomial. Everything else (entropy-bounded acceptance, temperature schedule, stability and
confidence stops, encoder pass on the appended canvas) is transformers' code, unchanged. Each case
runs in float32 (what the goldens record) and in float64, and the script fails unless both give the
same ids: a golden that rounding could flip would make the fp4lm test flaky.

Run: /work/venvs/torch/bin/python scripts/make_diffusion_gemma_goldens.py
"""
import json
import os
import shutil

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "fixtures", "diffusion_gemma")
OUT = os.path.join(ROOT, "tiny")
PAD = 0
CANVAS = 8
SC_GAIN = float(os.environ.get("DG_SC_GAIN", "0.02"))
NORM_GAIN = float(os.environ.get("DG_NORM_GAIN", "40"))


def make_model():
    torch.manual_seed(47)
    text = dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, sliding_window=6, max_position_embeddings=256,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        num_experts=4, top_k_experts=2, moe_intermediate_size=24, final_logit_softcapping=30.0,
        pad_token_id=PAD, eos_token_id=1, bos_token_id=2,
    )
    vision = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=8, patch_size=4,
                  position_embedding_size=8)
    cfg = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=CANVAS)
    model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    model.set_experts_implementation("eager")  # the grouped kernel has no float64
    # Random weights for the parameters transformers initializes to ones / zeros, so that a wrong
    # use of them (router scale, per-expert scale, layer scalar, norm weights) shows in the logits.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".scale") or name.endswith("per_expert_scale"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
        for layer in model.model.decoder.layers:
            layer.layer_scalar.copy_(torch.tensor([0.7]))
        # The encoder's layer_scalar is its own buffer (not tied to the decoder's): a different value.
        for layer in model.model.encoder.language_model.layers:
            layer.layer_scalar.copy_(torch.tensor([0.8]))
        # Sharper logits than the init's, so the entropy-bounded acceptance takes several tokens: through
        # the final norm, not the (tied) embeddings, which the self-conditioning signal is made of.
        model.model.decoder.norm.weight.mul_(NORM_GAIN)
        # A weak self-conditioning signal: with the init's, this random model's denoising steps amplify
        # rounding differences tenfold each (float32 and float64 runs part within a canvas); weak, a
        # difference shrinks from step to step and some canvases settle (the stability stop).
        model.model.decoder.self_conditioning.down_proj.weight.mul_(SC_GAIN)
        # nn.Embedding zeroes the padding row at init, which would leave a pad position's input all
        # self-conditioning signal (scale-free after post_norm): a random row like the others.
        model.model.decoder.embed_tokens.weight[PAD].normal_(0.0, 0.02)
    return model


def logits_of(model, hidden):
    with torch.no_grad():
        x = model.lm_head(hidden).double()
        return torch.tanh(x / 30.0) * 30.0


def deterministic_generate(model, prompt, gen_cfg, **kw):
    """transformers' generate with pad-initialized canvases and an argmax denoiser."""
    orig_init = gen.EntropyBoundSampler.initialize_canvas
    orig_mult = torch.multinomial

    def init_pad(self, batch_size, device):
        return torch.full((batch_size, self.canvas_length), PAD, dtype=torch.long, device=device)

    def argmax(probs, num_samples=1, **_):
        return torch.argmax(probs, dim=-1, keepdim=True)

    gen.EntropyBoundSampler.initialize_canvas = init_pad
    torch.multinomial = argmax
    mark = torch.compiler.cudagraph_mark_step_begin
    torch.compiler.cudagraph_mark_step_begin = lambda: None  # CUDA graphs only; importing inductor fails here
    try:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), generation_config=gen_cfg, **kw)
    finally:
        gen.EntropyBoundSampler.initialize_canvas = orig_init
        torch.multinomial = orig_mult
        torch.compiler.cudagraph_mark_step_begin = mark
    return out.sequences[0, len(prompt):].tolist()


def main():
    model = make_model()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    gen_cfg = gen.DiffusionGemmaGenerationConfig(
        max_new_tokens=256, max_denoising_steps=int(os.environ.get("DG_STEPS", "6")), sampler_config=gen.EntropyBoundSamplerConfig(entropy_bound=2.0),
        t_min=0.4, t_max=0.8, stability_threshold=1, confidence_threshold=1.5,
        bos_token_id=2, pad_token_id=PAD, eos_token_id=1)
    model.generation_config = gen_cfg
    model.save_pretrained(OUT)  # writes generation_config.json too

    # 1. Logits: fp64 copy of the same weights.
    m64 = make_model().double()
    prompt = [2, 17, 33, 5, 60, 41, 12, 77, 9, 23]  # 10 tokens > sliding window 6
    canvas = [0, 44, 0, 0, 13, 91, 0, 7]
    from transformers import DynamicCache
    with torch.no_grad():
        cache = DynamicCache(config=m64.config.get_text_config(decoder=True))
        enc = m64.model.encoder(input_ids=torch.tensor([prompt]), cache=cache)
        enc_logits = logits_of(m64, enc.last_hidden_state)[0]
        dec = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]))
        dec_logits = dec.logits.double()[0]
        dec2 = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]),
                   self_conditioning_logits=dec.logits / 0.7)
        dec_sc_logits = dec2.logits.double()[0]
    enc_logits.numpy().astype("<f8").tofile(os.path.join(OUT, "expected_encoder_logits.f64"))
    dec_logits.numpy().astype("<f8").tofile(os.path.join(OUT, "expected_decoder_logits.f64"))
    dec_sc_logits.numpy().astype("<f8").tofile(os.path.join(OUT, "expected_decoder_sc_logits.f64"))

    # 2. Generation in float32 (what fp4lm runs with --dtype float32), reloaded from disk.
    m32 = DiffusionGemmaForBlockDiffusion.from_pretrained(OUT, dtype=torch.float32).eval()
    m32.set_experts_implementation("eager")
    m64.generation_config = gen_cfg

    def run_case(p, n, eos):
        cfg = gen.DiffusionGemmaGenerationConfig(**{k: v for k, v in gen_cfg.to_dict().items()
                                                   if k in ("max_denoising_steps", "t_min", "t_max",
                                                            "stability_threshold", "confidence_threshold",
                                                            "bos_token_id", "pad_token_id")},
                                                 sampler_config=gen_cfg.sampler_config, max_new_tokens=n,
                                                 eos_token_id=eos)
        steps = []
        orig = gen.StableAndConfidentStoppingCriteria.__call__

        def spy(self, argmax_canvas, logits, **kw):
            r = orig(self, argmax_canvas, logits, **kw)
            steps.append(bool(r.all()))
            ent = torch.distributions.Categorical(logits=logits).entropy().mean().item()
            if os.environ.get("DG_DEBUG"):
                print("  step entropy %.3f stable-and-confident %s" % (ent, bool(r.all())))
            return r

        gen.StableAndConfidentStoppingCriteria.__call__ = spy
        try:
            ids = deterministic_generate(m32, p, cfg)
        finally:
            gen.StableAndConfidentStoppingCriteria.__call__ = orig
        # The goldens must not hang on rounding: float64 gives the same tokens.
        ids64 = deterministic_generate(m64, p, cfg)
        assert ids64 == ids, f"float64 {ids64} != float32 {ids}: the denoising amplifies rounding"
        return ids, len(steps), sum(steps)

    cases = []
    # two_canvases: a prompt (found by trying a few dozen) after which one canvas settles, so the
    # stability and confidence stop ends its denoising early; this random model rarely settles.
    for name, p, n in [("two_canvases", [2, 30, 9, 42], 16), ("three_canvases_long_prompt", prompt, 24)]:
        ids, passes, stops = run_case(p, n, None)
        cases.append({"name": name, "prompt_ids": p, "max_tokens": n, "stop_token_ids": [],
                      "output_ids": ids, "decoder_passes": passes, "early_stops": stops})
        print(name, ids, "decoder passes", passes, "early stops", stops)
    # A stop token: the first token of the second canvas that the first canvas does not hold, given to
    # transformers as an extra eos_token_id (fp4lm: --stop-token-ids). transformers pads after it.
    p, n = [2, 50, 8], 24
    free, _, _ = run_case(p, n, None)
    stop = next(t for t in free[CANVAS:2 * CANVAS] if t not in free[:CANVAS] and t != 1)
    ids, passes, stops = run_case(p, n, [1, stop])
    assert PAD not in free
    cases.append({"name": "stop_token", "prompt_ids": p, "max_tokens": n, "stop_token_ids": [stop],
                  "output_ids": ids, "decoder_passes": passes, "early_stops": stops})
    print("stop_token", stop, ids, "decoder passes", passes, "early stops", stops)

    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump({"prompt_ids": prompt, "canvas": canvas, "self_conditioning_divisor": 0.7,
                   "vocab_size": 96, "cases": cases}, f, indent=1)
    print("max |encoder logit|", enc_logits.abs().max().item(), "max |decoder logit|", dec_logits.abs().max().item())


if __name__ == "__main__":
    main()
