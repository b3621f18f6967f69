"""Writes tests/model/fixtures/modelopt_w4a8_nvfp4_fp8/: a tiny random Llama quantized by NVIDIA
ModelOpt (nvidia-modelopt 0.47.0, CPU) with its W4A8_NVFP4_FP8_CFG recipe (and the other RECIPES below) and exported by its
unified HF exporter, plus golden.json: for fixed tokens, the float64 logits transformers computes with the exported
tensors' meaning — every quantized Linear's weight dequantized (E2M1 code x E4M3 block scale x
weight_scale_2) and its input quantized to float8_e4m3fn with its input_scale (torch's own cast,
saturating at +-448). ModelOpt's fake-quantized forward cannot run here: its dynamic block
quantization asserts CUDA tensors, so the reference is built from the export instead.

Usage: python scripts/make_modelopt_goldens.py  (in a venv with nvidia-modelopt==0.47.0,
transformers and torch; not run by CI)."""
import copy
import json
import os
import shutil
import sys

import torch
import modelopt.torch.quantization as mtq
from modelopt.torch.export import export_hf_checkpoint
from transformers import LlamaConfig, LlamaForCausalLM

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "fixtures")
RECIPES = {"w4a8_nvfp4_fp8": "W4A8_NVFP4_FP8_CFG", "fp8_per_channel_per_token": "FP8_PER_CHANNEL_PER_TOKEN_CFG",
           "fp8_pb_wo": "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", "mxfp8": "MXFP8_DEFAULT_CFG",
           "w8a16": "INT8_WEIGHT_ONLY_CFG", "w8a8_sq": "INT8_SMOOTHQUANT_CFG", "w4a8_mxfp4_fp8": "W4A8_MXFP4_FP8_CFG"}
# The int8 recipes' golden is ModelOpt's own fake-quantized forward (its int8 quantizer runs on the
# CPU), in float64: the model's parameters and activations float64, each quantizer computing in
# float32 as _tensor_quant does (round half even, clamp [-128, 127]: narrow_range is False).
FAKE_QUANT_GOLDEN = {"w8a16", "w8a8_sq"}
# FP8_PB_WO's 128 x 128 blocks: sizes that are not multiples of 128 (partial blocks on both
# axes, grids of 2 x 2, 3 x 2, 2 x 3, and k_proj's 1 x 2).
SIZES = {"fp8_pb_wo": dict(hidden_size=160, intermediate_size=320, head_dim=40),
         # int8: input widths that are not multiples of 16 or 32 (the kernels' tails): 80 and 136.
         "w8a16": dict(hidden_size=80, intermediate_size=136, head_dim=20),
         "w8a8_sq": dict(hidden_size=80, intermediate_size=136, head_dim=20)}
TOKENS = [1, 7, 42, 3, 63, 20, 20, 5, 31, 11]


INPUTS = {"fp8_pb_wo": " (weight-only: float64 inputs)",
          "mxfp8": " with MXFP8 inputs (ModelOpt's MXFP8QTensor on the float32 input)",
          # The recipe has no calibration algorithm: the FP8 input quantizer keeps no amax, the export
          # writes no input_scale, and ModelOpt's forward takes each input's own amax (_fp8_eager).
          "w4a8_mxfp4_fp8": " with float8_e4m3fn inputs scaled by each input's own amax (ModelOpt's _fp8_eager "
                            "on the float32 input; MXFP4 weights dequantized with its MXFP4QTensor)"}


def write_golden(out, recipe, logits, how):
    p = os.path.join(out, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"producer": f"nvidia-modelopt 0.47.0 {recipe} export; {how}",
                   "tokens": TOKENS, "logits": [[round(v, 9) for v in row] for row in logits.tolist()]}, f)
        f.write("\n")
    print("wrote", out)


def check_int8_export(out, cfg, golden):
    """The export's meaning (docs/FORMAT.md, "W8A16 and W8A8_SQ_PER_CHANNEL") in a float64 forward:
    weight = I8 code x weight_scale[row]; with an input_scale, x -> x * pre_quant_scale, then
    clamp(round_half_even(x / input_scale), -128, 127) * input_scale. It must give the fake-quantized
    forward's logits (to float32 rounding), or the fixture would not say what the engine runs."""
    from safetensors.torch import load_file  # noqa: E402

    st = load_file(os.path.join(out, "model.safetensors"))
    ref = LlamaForCausalLM(cfg).double().eval()
    state, hooks = {}, {}
    for name, t in st.items():
        if name.endswith(".weight") and t.dtype == torch.int8:
            mod = name[: -len(".weight")]
            state[name] = t.double() * st[mod + ".weight_scale"].double().reshape(-1, 1)
            if mod + ".input_scale" in st:
                hooks[mod] = (st[mod + ".pre_quant_scale"].double(), st[mod + ".input_scale"].double())
        elif not name.endswith("_scale"):
            state[name] = t.double()
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    for mod, (pq, s) in hooks.items():
        def hook(_module, args, pq=pq, s=s):
            x = args[0] * pq
            return ((x / s).round().clamp(-128, 127) * s,) + tuple(args[1:])
        ref.get_submodule(mod).register_forward_pre_hook(hook)
    with torch.no_grad():
        logits = ref(torch.tensor([TOKENS])).logits[0]
    err = ((logits - golden).abs().max() / (golden.max() - golden.min())).item()
    print(f"export semantics vs fake-quant forward: {err:.2e} of the range")
    assert err < 1e-6, err


def make(algo, recipe):
    OUT = os.path.join(FIXTURES, "modelopt_" + algo)
    torch.manual_seed(0)
    dims = SIZES.get(algo, dict(hidden_size=64, intermediate_size=128))
    cfg = LlamaConfig(vocab_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, architectures=["LlamaForCausalLM"], bos_token_id=1,
                      eos_token_id=2, **dims)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, 64, (1, 16), generator=gen) for _ in range(4)]


    def forward_loop(m):
        for ids in calib:
            m(ids)


    mtq.quantize(model, getattr(mtq, recipe), forward_loop)
    if algo in FAKE_QUANT_GOLDEN:
        fq = copy.deepcopy(model).double()
        with torch.no_grad():
            logits = fq(torch.tensor([TOKENS])).logits[0]
    shutil.rmtree(OUT, ignore_errors=True)
    export_hf_checkpoint(model, export_dir=OUT)
    if algo in FAKE_QUANT_GOLDEN:
        check_int8_export(OUT, cfg, logits)
        write_golden(OUT, recipe, logits, "ModelOpt's fake-quantized forward in float64 (quantizers in float32)")
        return

    from safetensors.torch import load_file  # noqa: E402

    E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)
    st = load_file(os.path.join(OUT, "model.safetensors"))
    ref = LlamaForCausalLM(cfg).double().eval()
    dense, input_scales = {}, {}
    for name, t in st.items():
        if not name.endswith(".weight") or t.dtype != torch.uint8:
            continue
        mod = name[: -len(".weight")]
        if algo == "w4a8_mxfp4_fp8":  # U8 E2M1 codes, U8 E8M0 scale per 32: ModelOpt's own dequantization
            from modelopt.torch.quantization.qtensor import MXFP4QTensor
            s = st[mod + ".weight_scale"]
            assert s.dtype == torch.uint8 and s.shape == (t.shape[0], t.shape[1] // 16), (name, s.shape)
            assert mod + ".input_scale" not in st and mod + ".weight_scale_2" not in st
            q = MXFP4QTensor((t.shape[0], t.shape[1] * 2), torch.float32, t)
            w = q.dequantize(dtype=torch.float32, scale=s.reshape(-1, 1), block_sizes={-1: 32}).double()
            codes = torch.stack([t & 0xF, t >> 4], dim=-1).reshape(t.shape[0], -1).long()
            mine = E2M1[codes] * torch.exp2(s.double() - 127).repeat_interleave(32, dim=1)
            assert torch.equal(w, mine), name  # the rule docs/FORMAT.md states
            dense[name] = w
            input_scales[mod] = "fp8_tensor"
            continue
        codes = torch.stack([t & 0xF, t >> 4], dim=-1).reshape(t.shape[0], -1).long()
        scales = st[mod + ".weight_scale"].double()
        block = codes.shape[1] // scales.shape[1]
        w = E2M1[codes] * scales.repeat_interleave(block, dim=1) * st[mod + ".weight_scale_2"].double()
        dense[name] = w
        input_scales[mod] = st[mod + ".input_scale"].double()
    for name, t in st.items():
        if not name.endswith(".weight") or t.dtype != torch.float8_e4m3fn:
            continue
        mod = name[: -len(".weight")]
        s = st[mod + ".weight_scale"]
        assert mod + ".input_scale" not in st
        if algo == "fp8_pb_wo":  # fp32 amax / 448 per 128 x 128 block, [R, 1, C, 1] (or [] for one block)
            n, k = t.shape
            grid = s.double().reshape((n + 127) // 128, (k + 127) // 128)
            dense[name] = t.double() * grid.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
            input_scales[mod] = "none"  # weight-only
        elif algo == "mxfp8":  # E8M0 bytes per 32 along k: 2^(byte - 127)
            assert s.dtype == torch.uint8
            dense[name] = t.double() * torch.exp2(s.double() - 127).repeat_interleave(32, 1)
            input_scales[mod] = "mx"
        else:
            dense[name] = t.double() * s.double().reshape(-1, 1)
            input_scales[mod] = None  # per token
    state = {k: v.double() for k, v in st.items() if not k.endswith(("_scale", "_scale_2"))}
    state.update(dense)
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing


    def fp8_input(scale):
        def hook(_module, args):
            x = args[0]
            if isinstance(scale, str) and scale == "none":
                return None
            if isinstance(scale, str) and scale == "fp8_tensor":
                from modelopt.torch.quantization.tensor_quant import fp8_eager
                xf = x.float()
                return (fp8_eager(xf, xf.abs().amax()).double(),) + tuple(args[1:])
            if isinstance(scale, str) and scale == "mx":
                # ModelOpt's own MXFP8 quantizer (E8M0 scale 2^ceil(log2(amax / 448)) per 32 inputs),
                # on the float32 input the engine holds; its fake quant is a CUDA extension.
                from modelopt.torch.quantization.qtensor import MXFP8QTensor
                q, sc = MXFP8QTensor.quantize(x.float())
                return (q.dequantize(dtype=torch.float32, scale=sc).double(),) + tuple(args[1:])
            s = scale if scale is not None else x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10) / 448
            q = (x / s).clamp(-448, 448).to(torch.float8_e4m3fn).double() * s
            return (q,) + tuple(args[1:])
        return hook


    for mod, scale in input_scales.items():
        ref.get_submodule(mod).register_forward_pre_hook(fp8_input(scale))
    with torch.no_grad():
        logits = ref(torch.tensor([TOKENS])).logits[0]
    for extra in ("generation_config.json",):
        p = os.path.join(OUT, extra)
        if os.path.exists(p):
            os.remove(p)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"producer": f"nvidia-modelopt 0.47.0 {recipe} export; transformers float64 forward of its dequantized weights"
                                f"{INPUTS.get(algo, ' with float8_e4m3fn inputs')}",
                   "tokens": TOKENS, "logits": [[round(v, 9) for v in row] for row in logits.tolist()]}, f)
        f.write("\n")
    print("wrote", OUT)


SVD_RANK = 8


def make_nvfp4_svd():
    """tests/model/fixtures/modelopt_nvfp4_svd/: NVFP4_SVDQUANT_DEFAULT_CFG's export, ModelOpt 0.47.0 on the CPU.

    The recipe's calibration (model_calib.svdquant: awq_lite's scale search, then the SVD) runs
    NVFP4's dynamic block fake quantization, which asserts CUDA tensors (tensor_quant.py,
    _dynamic_block_quantize_impl: "amax must be a CUDA tensor"). So the quantizers are inserted
    without calibration and given what svdquant() would set, here by hand: an AWQ-style
    pre_quant_scale per layer (sqrt(act amax / weight column amax), normalized), the rank-8 SVD of the
    smoothed weight (ModelOpt's own model_calib.svd) as svdquant_lora_b @ svdquant_lora_a, the
    residual weight W / pqs - B A, and the amaxes of the residual and of x * pqs. ModelOpt's exporter
    then does the rest (resmoothing the fused q/k/v and gate/up to one pre_quant_scale and one
    lora_a: quant_utils._update_svdquant; the NVFP4 packing; the config files).

    golden.json: "logits" as stored, a float64 transformers forward where each quantized Linear
    computes x' = x * pre_quant_scale, NVFP4 W4A4 on x' (x' quantized by ModelOpt's NVFP4QTensor with
    input_scale as its global scale) plus (x' A^T) B^T; "logits_w4a16": the same with x' unquantized.
    """
    import copy as _copy
    from safetensors.torch import load_file
    from modelopt.torch.quantization.conversion import create_and_replace_svdquant_linear_on_the_fly
    from modelopt.torch.quantization.model_calib import svd
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    OUT = os.path.join(FIXTURES, "modelopt_nvfp4_svd")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, architectures=["LlamaForCausalLM"], bos_token_id=1,
                      eos_token_id=2, hidden_size=64, intermediate_size=128)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, 64, (1, 16), generator=gen) for _ in range(4)]
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    act_amax = {n: torch.zeros(m.in_features) for n, m in linears.items()}

    def observe(n):
        def hook(_m, args):
            act_amax[n] = torch.maximum(act_amax[n], args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0))
        return hook

    hooks = [m.register_forward_pre_hook(observe(n)) for n, m in linears.items()]
    with torch.no_grad():
        for ids in calib:
            model(ids)
    for h in hooks:
        h.remove()
    recipe = _copy.deepcopy(mtq.NVFP4_SVDQUANT_DEFAULT_CFG)
    recipe["algorithm"] = None  # its svdquant calibration needs CUDA (above)
    mtq.quantize(model, recipe, None)
    create_and_replace_svdquant_linear_on_the_fly(model=model)
    with torch.no_grad():
        for n, m in model.named_modules():
            if n not in linears:
                continue
            w = m.weight.data
            pqs = act_amax[n].clamp(min=1e-4).sqrt() / w.abs().amax(0).clamp(min=1e-4).sqrt()
            pqs = pqs / pqs.max()
            m.input_quantizer.pre_quant_scale = pqs
            smoothed = w / pqs
            us, vt = svd(smoothed, SVD_RANK)
            m.weight_quantizer.svdquant_lora_a = vt
            m.weight_quantizer.svdquant_lora_b = us
            m.weight.data = smoothed - us @ vt
            m.weight_quantizer.amax = m.weight.data.abs().amax()
            m.input_quantizer.amax = (act_amax[n] * pqs).amax()
    shutil.rmtree(OUT, ignore_errors=True)
    export_hf_checkpoint(model, export_dir=OUT)

    E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)
    st = load_file(os.path.join(OUT, "model.safetensors"))
    layers = {}
    state = {}
    for name, t in st.items():
        if name.endswith(".weight") and t.dtype == torch.uint8:
            mod = name[: -len(".weight")]
            codes = torch.stack([t & 0xF, t >> 4], dim=-1).reshape(t.shape[0], -1).long()
            scales = st[mod + ".weight_scale"].double().repeat_interleave(16, dim=1)
            state[name] = E2M1[codes] * scales * st[mod + ".weight_scale_2"].double()
            q = mod + ".weight_quantizer._svdquant_lora_"
            layers[mod] = (st[mod + ".pre_quant_scale"].double(), st[mod + ".input_scale"].float(),
                           st[q + "a"].double(), st[q + "b"].double())
        elif not (name.endswith(("_scale", "_scale_2")) or "_svdquant_lora_" in name):
            state[name] = t.double()

    def forward(quantize_inputs):
        ref = LlamaForCausalLM(cfg).double().eval()
        missing, unexpected = ref.load_state_dict(state, strict=False)
        assert not unexpected, unexpected
        assert all("rotary" in k for k in missing), missing
        for mod, (pqs, s_in, a, b) in layers.items():
            lin = ref.get_submodule(mod)

            def fwd(x, lin=lin, pqs=pqs, s_in=s_in, a=a, b=b):
                xs = x * pqs
                xq = xs
                if quantize_inputs:
                    qt, sc, s2 = NVFP4QTensor.quantize(xs.float(), 16, None, s_in)
                    xq = qt.dequantize(dtype=torch.float32, scale=sc, double_scale=s2, block_sizes={-1: 16}).double()
                return torch.nn.functional.linear(xq, lin.weight) + (xs @ a.T) @ b.T

            lin.forward = fwd
        with torch.no_grad():
            return ref(torch.tensor([TOKENS])).logits[0]

    stored, w4a16 = forward(True), forward(False)
    p = os.path.join(OUT, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"producer": "nvidia-modelopt 0.47.0 NVFP4_SVDQUANT_DEFAULT_CFG export (quantizers set by hand: its "
                               "calibration needs CUDA); transformers float64 forward of its dequantized weights, "
                               "pre_quant_scale and low-rank branch; logits: inputs NVFP4 (NVFP4QTensor, input_scale), "
                               "logits_w4a16: inputs unquantized",
                   "tokens": TOKENS,
                   "logits": [[round(v, 9) for v in row] for row in stored.tolist()],
                   "logits_w4a16": [[round(v, 9) for v in row] for row in w4a16.tolist()]}, f)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    for algo in sys.argv[1:] or list(RECIPES) + ["nvfp4_svd"]:
        if algo == "nvfp4_svd":
            make_nvfp4_svd()
        else:
            make(algo, RECIPES[algo])
