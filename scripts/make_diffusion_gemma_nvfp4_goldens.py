#!/usr/bin/env python3
"""NVFP4 goldens for DiffusionGemma: ModelOpt-format checkpoints of the tiny random model.

The model is make_diffusion_gemma_goldens.py's (same seed and recipe) with moe_intermediate_size 32
(NVFP4 blocks are 16 inputs: the experts' down_proj needs a multiple of 16). Every Linear of the
blocks and of the self-conditioning MLP is quantized to NVFP4 as docs/FORMAT.md states ModelOpt's
export (E2M1 codes, element 2j in the low nibble; an E4M3 scale per 16 inputs; weight_scale_2 =
amax / 2688 shared by the shards fp4lm fuses: q/k/v, gate/up, an expert's gate/up); the experts
are written per expert (`experts.<e>.{gate,up,down}_proj`), as ModelOpt exports them. The router,
the embedding (tied lm_head) and the norms stay float32 (exclude_modules).

Two directories under tests/model/fixtures/diffusion_gemma/:
  tiny_w4a16_nvfp4/  quant_algo W4A16_NVFP4 (weight-only): expected_*.f64 are transformers' float64
                     logits with the weights replaced by their dequantized NVFP4 values, so the only
                     difference from fp4lm's float32 activations is rounding.
  tiny_nvfp4/        quant_algo NVFP4 (W4A4, NVIDIA's published format): the same codes plus each
                     module's input_scale = amax(input) / 2688 over the prompt and canvas (the
                     experts': over the tokens of the experts' input, every expert alike). The same
                     expected_*.f64 (weight-only reference); the 4-bit activations add their error.
Each holds config.json (with quantization_config) and hf_quant_config.json, generation_config.json,
model.safetensors and goldens.json (the prompt and canvas, as the float fixture's; W4A16's also
transformers' generate() ids on the dequantized weights under fp4lm's --temperature 0 rule).

Run: /work/venvs/torch/bin/python scripts/make_diffusion_gemma_nvfp4_goldens.py
"""
import importlib.util
import json
import os
import shutil

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("dg", os.path.join(HERE, "make_diffusion_gemma_goldens.py"))
dg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dg)

MOE_INTER = 32
_Config = dg.DiffusionGemmaConfig
dg.DiffusionGemmaConfig = lambda text_config, **kw: _Config(text_config={**text_config, "moe_intermediate_size": MOE_INTER}, **kw)

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def quantize(w, global_amax):
    """ModelOpt NVFP4 of w [n, k] (float64): (packed codes U8 [n, k/2], scales E4M3 [n, k/16],
    weight_scale_2, the dequantized float64 weight)."""
    n, k = w.shape
    ws2 = torch.tensor(global_amax / 2688.0, dtype=torch.float32)
    blocks = w.reshape(n, k // 16, 16)
    bamax = blocks.abs().amax(dim=-1)
    sf = (bamax / 6.0 / ws2.double()).float().clamp(max=448.0).to(torch.float8_e4m3fn)
    scale = sf.double() * ws2.double()  # per block
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    x = blocks / safe.unsqueeze(-1)
    mag = x.abs().clamp(max=6.0)
    idx = (mag.unsqueeze(-1) - E2M1).abs().argmin(dim=-1)  # nearest (ties: the smaller index, even code)
    code = idx | ((x < 0) & (idx > 0)).long() << 3
    deq = (E2M1[idx] * torch.where(x < 0, -1.0, 1.0)) * scale.unsqueeze(-1)
    code = code.reshape(n, k).to(torch.uint8)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed, sf, ws2, deq.reshape(n, k)


def e2m1_round(y):
    """Nearest E2M1 value of |y| <= 6 with its sign, ties to the even code (docs/FORMAT.md)."""
    mag = y.abs().clamp(max=6.0)
    dist = (mag.unsqueeze(-1) - E2M1).abs() + torch.tensor([0, 1, 0, 1, 0, 1, 0, 1], dtype=torch.float64) * 1e-12
    return E2M1[dist.argmin(dim=-1)] * torch.where(y < 0, -1.0, 1.0)


def qdq_activation(x, input_scale):
    """NVFP4 W4A4's run-time input quantization (quant/nvfp4.h quantize_activation, then
    dequantize): per 16 inputs sf = e4m3(min(G * bamax / 6, 448)), G = 1 / input_scale; value =
    e2m1(x * G / sf) * sf * input_scale; 0 where sf is 0."""
    s = torch.tensor(input_scale, dtype=torch.float32)
    g = (1.0 / s).float()
    shape = x.shape
    b = x.reshape(-1, shape[-1] // 16, 16)
    bamax = b.abs().amax(dim=-1).float()
    sf = torch.clamp(g * bamax / 6.0, max=448.0).to(torch.float8_e4m3fn).float()
    safe = torch.where(sf == 0, torch.ones_like(sf), sf)
    y = b * (g / safe).double().unsqueeze(-1)
    v = e2m1_round(y) * safe.double().unsqueeze(-1) * s.double()
    v = torch.where((sf == 0).unsqueeze(-1), torch.zeros_like(v), v)
    return v.reshape(shape)


def main():
    model = dg.make_model()
    m64 = dg.make_model().double()
    sd = {k: v.detach().clone() for k, v in m64.state_dict().items()}
    out = {}
    deq = {}

    def q_group(names, tensors):
        amax = max(t.abs().max().item() for t in tensors)
        for name, t in zip(names, tensors):
            packed, sf, ws2, d = quantize(t, amax)
            out[name + ".weight"] = packed
            out[name + ".weight_scale"] = sf
            out[name + ".weight_scale_2"] = ws2.reshape(())
            deq[name] = d

    L = m64.config.text_config.num_hidden_layers
    for i in range(L):
        p = f"model.decoder.layers.{i}."
        attn = [p + "self_attn." + s for s in ("q_proj", "k_proj", "v_proj") if p + "self_attn." + s + ".weight" in sd]
        q_group(attn, [sd[a + ".weight"] for a in attn])
        q_group([p + "self_attn.o_proj"], [sd[p + "self_attn.o_proj.weight"]])
        q_group([p + "mlp.gate_proj", p + "mlp.up_proj"], [sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        q_group([p + "mlp.down_proj"], [sd[p + "mlp.down_proj.weight"]])
        gu, dn = sd[p + "experts.gate_up_proj"], sd[p + "experts.down_proj"]
        for e in range(gu.shape[0]):
            ep = p + f"experts.{e}."
            q_group([ep + "gate_proj", ep + "up_proj"], [gu[e, :MOE_INTER], gu[e, MOE_INTER:]])
            q_group([ep + "down_proj"], [dn[e]])
    s = "model.decoder.self_conditioning."
    q_group([s + "gate_proj", s + "up_proj"], [sd[s + "gate_proj.weight"], sd[s + "up_proj.weight"]])
    q_group([s + "down_proj"], [sd[s + "down_proj.weight"]])

    # The float64 reference with the dequantized weights.
    with torch.no_grad():
        params = m64.state_dict(keep_vars=True)  # every name, tied ones included
        for name, d in deq.items():
            if ".experts." in name:
                head, e, proj = name.rsplit(".", 2)
                e = int(e)
                if proj == "gate_proj":
                    params[head + ".gate_up_proj"][e, :MOE_INTER].copy_(d)
                elif proj == "up_proj":
                    params[head + ".gate_up_proj"][e, MOE_INTER:].copy_(d)
                else:
                    params[head + ".down_proj"][e].copy_(d)
            else:
                params[name + ".weight"].copy_(d)
    # Everything not quantized, as stored (float32), under the decoder's names and the encoder's
    # own layer_scalar; no vision tower (never read).
    saved = model.state_dict()
    for k, v in saved.items():
        if "vision" in k or "embed_vision" in k or k == "lm_head.weight":  # lm_head: tied
            continue
        if k.startswith("model.encoder.language_model.") and not k.endswith("layer_scalar"):
            continue  # tied to the decoder's
        mod = k.rsplit(".", 1)[0]
        if mod in deq or ".experts." in k:
            continue
        out[k] = v.detach().float().contiguous()

    # Activation amax per module over the reference's prompt and canvas (W4A4's input_scale).
    prompt = [2, 17, 33, 5, 60, 41, 12, 77, 9, 23]
    canvas = [0, 44, 0, 0, 13, 91, 0, 7]
    amax = {}

    def note(name, x):
        amax[name] = max(amax.get(name, 0.0), x.abs().max().item())

    hooks = []
    for name, mod in m64.named_modules():
        if isinstance(mod, torch.nn.Linear):
            hooks.append(mod.register_forward_pre_hook(lambda m, a, n=name: note(n, a[0])))
        if name.endswith(".experts"):
            def hook(m, a, n=name):
                x = a[0]
                note(n + ".in", x)
                gu = torch.einsum("th,eih->eti", x.reshape(-1, x.shape[-1]), m.gate_up_proj)
                g, u = gu[..., :MOE_INTER], gu[..., MOE_INTER:]
                note(n + ".mid", torch.nn.functional.gelu(g, approximate="tanh") * u)
            hooks.append(mod.register_forward_pre_hook(hook))

    from transformers import DynamicCache
    with torch.no_grad():
        cache = DynamicCache(config=m64.config.get_text_config(decoder=True))
        enc = m64.model.encoder(input_ids=torch.tensor([prompt]), cache=cache)
        enc_logits = dg.logits_of(m64, enc.last_hidden_state)[0]
        dec = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]))
        dec_logits = dec.logits.double()[0]
        dec2 = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]), self_conditioning_logits=dec.logits / 0.7)
        dec_sc_logits = dec2.logits.double()[0]
    for h in hooks:
        h.remove()

    def disk(name):  # the encoder's modules are the decoder's (tied)
        return name.replace("model.encoder.language_model.", "model.decoder.")

    scales = {}
    for name, a in amax.items():
        if name.endswith(".in") or name.endswith(".mid"):
            box = disk(name.rsplit(".", 1)[0])
            for e in range(m64.config.text_config.num_experts):
                projs = ("gate_proj", "up_proj") if name.endswith(".in") else ("down_proj",)
                for pj in projs:
                    key = f"{box}.{e}.{pj}"
                    scales[key] = max(scales.get(key, 0.0), a / 2688.0)
        elif disk(name) in deq:
            scales[disk(name)] = max(scales.get(disk(name), 0.0), a / 2688.0)

    # The W4A4 reference: the same dequantized model with every quantized module's input passed
    # through NVFP4's run-time quantization with its input_scale.
    w4a4 = {}
    hooks = []
    for name, mod in m64.named_modules():
        if isinstance(mod, torch.nn.Linear) and disk(name) in deq:
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, s=scales[disk(name)]: (qdq_activation(a[0], s),) + tuple(a[1:])))
    from transformers.models.diffusion_gemma import modeling_diffusion_gemma as mdg
    experts_forward = mdg.DiffusionGemmaTextExperts.forward
    box_of = {id(mod): disk(name) for name, mod in m64.named_modules() if name.endswith(".experts")}

    def w4a4_experts(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        box = box_of[id(self)]
        for t in range(hidden_states.shape[0]):
            for r in range(top_k_index.shape[1]):
                e = int(top_k_index[t, r])
                x = qdq_activation(hidden_states[t:t + 1], scales[f"{box}.{e}.gate_proj"])
                gate, up = torch.nn.functional.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
                h = qdq_activation(self.act_fn(gate) * up, scales[f"{box}.{e}.down_proj"])
                out[t] += (torch.nn.functional.linear(h, self.down_proj[e]) * top_k_weights[t, r])[0]
        return out

    mdg.DiffusionGemmaTextExperts.forward = w4a4_experts
    try:
        with torch.no_grad():
            cache = DynamicCache(config=m64.config.get_text_config(decoder=True))
            enc = m64.model.encoder(input_ids=torch.tensor([prompt]), cache=cache)
            w4a4["encoder"] = dg.logits_of(m64, enc.last_hidden_state)[0]
            dec = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]))
            w4a4["decoder"] = dec.logits.double()[0]
            dec2 = m64(cache=cache, decoder_input_ids=torch.tensor([canvas]),
                       self_conditioning_logits=dec.logits / 0.7)
            w4a4["decoder_sc"] = dec2.logits.double()[0]
    finally:
        mdg.DiffusionGemmaTextExperts.forward = experts_forward
        for h in hooks:
            h.remove()

    # Generation goldens (weight-only): transformers' generate under fp4lm's --temperature 0 rule on
    # the dequantized weights, in float32 and float64, which must agree.
    import tempfile
    from transformers import DiffusionGemmaForBlockDiffusion, GenerationConfig
    gen_prompt, gen_tokens = [2, 30, 9, 42], 16
    with tempfile.TemporaryDirectory() as tmp:
        m64.save_pretrained(tmp)
        shutil.copy(os.path.join(dg.OUT, "generation_config.json"), os.path.join(tmp, "generation_config.json"))
        outs = []
        for dt in (torch.float32, torch.float64):
            mg = DiffusionGemmaForBlockDiffusion.from_pretrained(tmp, dtype=dt).eval()
            mg.set_experts_implementation("eager")
            cfg = mg.generation_config
            cfg.max_new_tokens = gen_tokens
            outs.append(dg.deterministic_generate(mg, gen_prompt, cfg))
    assert outs[0] == outs[1], f"float32 {outs[0]} != float64 {outs[1]}"
    print("weight-only generate", outs[0])

    gen_cfg = json.load(open(os.path.join(dg.OUT, "generation_config.json")))
    base_cfg = json.load(open(os.path.join(dg.OUT, "config.json")))
    base_cfg["text_config"]["moe_intermediate_size"] = MOE_INTER
    exclude = ["lm_head", "model.decoder.embed_tokens", "model.encoder.vision_tower*", "model.encoder.embed_vision*"] + [
        f"model.decoder.layers.{i}.router.proj" for i in range(L)]
    for algo, sub in (("W4A16_NVFP4", "tiny_w4a16_nvfp4"), ("NVFP4", "tiny_nvfp4")):
        d = os.path.join(dg.ROOT, sub)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        tensors = dict(out)
        if algo == "NVFP4":
            for name in deq:
                tensors[name + ".input_scale"] = torch.tensor(scales[name], dtype=torch.float32)
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        q = {"quant_algo": algo, "group_size": 16, "exclude_modules": exclude}
        cfg = dict(base_cfg)
        cfg["quantization_config"] = {"quant_method": "modelopt", **q, "producer": {"name": "modelopt", "version": "0.47.0"}}
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
        json.dump({"producer": {"name": "modelopt", "version": "0.47.0"}, "quantization": q},
                  open(os.path.join(d, "hf_quant_config.json"), "w"), indent=2)
        json.dump(gen_cfg, open(os.path.join(d, "generation_config.json"), "w"), indent=2)
        enc_logits.numpy().astype("<f8").tofile(os.path.join(d, "expected_encoder_logits.f64"))
        dec_logits.numpy().astype("<f8").tofile(os.path.join(d, "expected_decoder_logits.f64"))
        dec_sc_logits.numpy().astype("<f8").tofile(os.path.join(d, "expected_decoder_sc_logits.f64"))
        if algo == "NVFP4":
            for k, v in w4a4.items():
                v.numpy().astype("<f8").tofile(os.path.join(d, f"expected_w4a4_{k}_logits.f64"))
        golden = {"prompt_ids": prompt, "canvas": canvas, "self_conditioning_divisor": 0.7, "vocab_size": 96,
                  "generate": {"prompt_ids": gen_prompt, "max_tokens": gen_tokens}}
        if algo == "W4A16_NVFP4":
            golden["generate"]["output_ids"] = outs[0]
        json.dump(golden,
                  open(os.path.join(d, "goldens.json"), "w"), indent=1)
        print(sub, len(tensors), "tensors", os.path.getsize(os.path.join(d, "model.safetensors")), "bytes")
    print("max |encoder logit|", enc_logits.abs().max().item(), "max |decoder logit|", dec_logits.abs().max().item())


if __name__ == "__main__":
    main()
