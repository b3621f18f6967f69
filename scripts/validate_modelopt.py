#!/usr/bin/env python3
"""Compares `fp4lm quantize` with NVIDIA ModelOpt's own quantize-and-export path, bit for bit.

ModelOpt's whole flow runs on CPU for tiny models: `mtq.quantize(model, CFG, forward_loop)`
(max calibration, fake-quant modules) then `export_hf_checkpoint` (which packs the weights with
`NVFP4QTensor.quantize` and writes hf_quant_config.json and config.json's quantization_config).
For each case below both tools quantize the same checkpoint (written by transformers itself) with
the same calibration token ids, and every tensor of the two exports is compared:

  weight (U8 E2M1 codes), weight_scale (E4M3 bytes), weight_scale_2 (F32 bits): bit-identical or
  not; input_scale (F32): bit-identical count and max relative difference (it is amax / 2688 of
  activations that each tool computes with its own forward); every other tensor: bytes;
  the JSON files key by key (producer name/version aside).

Cases:
  adversarial  float32 Llama whose Linear weights are random tensors built to hit every rounding
               rule: exact E2M1 ties at a global scale of 1.0, tiny negatives (-0 code), all-zero
               blocks, blocks 10^-7..1 of the tensor's amax (block scales clamped to 2^-9, E4M3
               subnormals), fused q/k/v and gate/up with different magnitudes (shared amax);
               W4A16_NVFP4 (weights only).
  llama        bfloat16 Llama, NVFP4 (W4A4) with calibration.
  llama-f32    the same weights stored as float32: both calibrate in float32, so input_scale
               differences from 16-bit forward rounding disappear.
  qwen3-moe    bfloat16 Qwen3-MoE, NVFP4 (W4A4) with calibration.
  nemotron-h   bfloat16 Nemotron-H, Mamba-2 / attention / relu² MLP layers (M*-M-), NVFP4 (W4A4)
               with calibration: ModelOpt's default exclusions leave every Mamba conv1d unquantized.
  nemotron-h-moe  bfloat16 Nemotron-H with Nemotron 3's MoE layers (ME*EM-): per-expert relu²
               experts, the (non-Linear) router kept in its dtype.
  nemotron-h-moe-f32  the same weights stored as float32 (input_scale differences from 16-bit
               rounding disappear).
  gemma3       bfloat16 Gemma3ForCausalLM (sliding/full layers, tied embeddings), NVFP4 with calibration.
  gemma3-vl    bfloat16 Gemma3ForConditionalGeneration (the text model above + a SigLIP tower and the
               multi-modal projector, which ModelOpt's default config leaves unquantized), NVFP4.
  gemma4       bfloat16 Gemma 4 dense as the 31B (full layers with keys doubling as values: q_proj and
               k_proj only), NVFP4 with calibration.
  gemma4-moe   bfloat16 Gemma 4 MoE as the 26B-A4B (router beside the dense MLP and 8 fused experts,
               which ModelOpt exports per expert), NVFP4 with calibration.
  gemma4-moe-f32  the same weights stored as float32 (input_scale differences from 16-bit rounding
               disappear, as for llama-f32).
  gemma4-ple   bfloat16 Gemma 4 as its small models (per-layer input embeddings, K/V shared by the
               last layers, double-wide MLPs there), NVFP4 with calibration.

Then fp4lm loads ModelOpt's export and its logits (`eval --dump-logits`, float32 activations)
are compared with transformers (float32) on the weights dequantized by ModelOpt's NVFP4QTensor,
with W4A4 activations quantized by NVFP4QTensor.quantize at the exported input_scale (ModelOpt's
own fake-quant forward needs CUDA: tensor_quant.py asserts amax.is_cuda for NVFP4 blocks).

Needs the venv of scripts/requirements-validate.txt (`bash scripts/validate.sh modelopt`).
Not run in CI. Exit status 0 when every weight tensor is bit-identical and the JSON files have
the same keys and values (exclusion lists compared as sets).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate_transformers as vt  # noqa: E402  (checkpoint writer, fp4lm runner)

import transformers  # noqa: E402
import modelopt  # noqa: E402
import modelopt.torch.quantization as mtq  # noqa: E402
from modelopt.torch.export import export_hf_checkpoint  # noqa: E402
from modelopt.torch.quantization.qtensor import NVFP4QTensor  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def load_tensors(d):
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), "pt") as f:
                for k in f.keys():
                    out[k] = f.get_tensor(k)
    return out


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


@torch.no_grad()
def adversarial_weights(model, seed):
    """Overwrites every Linear weight of a float32 Llama (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    for name, p in model.named_parameters():
        if p.dim() != 2 or "embed" in name or "lm_head" in name or "norm" in name:
            continue
        n, k = p.shape
        w = torch.randn(n, k, generator=g)
        blocks = w.view(n, k // 16, 16)
        # Per block magnitude 10^-7 .. 1 of the tensor's amax: block scales from 448 down to the
        # clamp at 2^-9 and through the E4M3 subnormals.
        blocks *= torch.pow(10.0, -7 * torch.rand(n, k // 16, 1, generator=g) ** 3)
        blocks[0, 0] = 0.0  # an all-zero block (ModelOpt: scale 1.0)
        if "q_proj" in name or "gate_proj" in name:
            # Global amax 2688 -> weight_scale_2 exactly 1.0 for the whole fused group; then a block
            # of amax 6 (block scale 1.0) holds every E2M1 tie and tiny negatives (-> code 8).
            w[0, 16] = 2688.0
            row = torch.cat([ties, -ties])[:16].clone()
            row[0] = 6.0
            blocks[1, 1] = row
            blocks[1, 2] = torch.tensor([6.0] + [-1e-4] * 5 + [1e-4] * 5 + [-0.25, 0.25, -0.75, 0.75, -5.0])
        if "k_proj" in name or "up_proj" in name:
            w *= 1e-3  # much smaller than its group partner: the shared amax decides its scales
        p.copy_(w)


def modelopt_export(model, cfg, calib, out_dir):
    def forward_loop(m):
        for ids in calib:
            m(input_ids=torch.tensor([ids]))
    mtq.quantize(model, cfg, forward_loop)
    export_hf_checkpoint(model, export_dir=out_dir)
    return model


def modelopt_dequantize(packed, scale, scale_2):
    """ModelOpt's own NVFP4 dequantization of one exported weight, in float32."""
    shape = (packed.shape[0], packed.shape[1] * 2)
    return NVFP4QTensor(torch.Size(shape), torch.float32, packed).dequantize(
        torch.float32, scale=scale, double_scale=scale_2, block_sizes={-1: 16})


def modelopt_fake_quant(x, input_scale):
    """x quantized and dequantized by ModelOpt's NVFP4QTensor with input_scale as the global scale
    (the static-scale form of the W4A4 activation quantization; ModelOpt's fake-quant forward
    needs CUDA, tensor_quant.py asserts amax.is_cuda)."""
    k = x.shape[-1]
    q, sc, s2 = NVFP4QTensor.quantize(x.reshape(-1, k).float(), 16, None, input_scale)
    return q.dequantize(torch.float32, scale=sc, double_scale=s2, block_sizes={-1: 16}).reshape(x.shape)


def reference_logits(mo_dir, src, model_cls, prompt):
    """transformers (float32) on ModelOpt's dequantized weights; every nn.Linear whose export has an
    input_scale gets its input through modelopt_fake_quant. None when a quantized layer with an
    input_scale is not an nn.Linear (transformers 5's fused MoE experts)."""
    t = load_tensors(mo_dir)
    out = {}
    for k, v in t.items():
        if k.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        b = k[: -len(".weight")]
        out[k] = (modelopt_dequantize(v, t[b + ".weight_scale"], t[b + ".weight_scale_2"])
                  if k.endswith(".weight") and b + ".weight_scale" in t else v.float())
    ddir = mo_dir + "-dequantized"
    os.makedirs(ddir, exist_ok=True)
    save_file(out, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(src, "config.json"), os.path.join(ddir, "config.json"))
    m = getattr(transformers, model_cls).from_pretrained(ddir, dtype=torch.float32, attn_implementation="eager",
                                                         experts_implementation="eager").eval()
    hooked = set()
    for name, mod in m.named_modules():
        # A VL model's modules (model.language_model.*) and Nemotron-H's (model.*: transformers 5's name
        # for backbone.*) as the checkpoint names them (transformers 5.24 saves Gemma 3's as
        # language_model.model.*).
        stored = next((n for n in (name, name.replace("model.language_model.", "language_model.model.", 1),
                                   "backbone." + name[len("model."):] if name.startswith("model.") else name)
                       if n + ".input_scale" in t), None)
        if isinstance(mod, torch.nn.Linear) and stored is not None:
            s = t[stored + ".input_scale"].float()
            mod.register_forward_pre_hook(lambda _m, a, s=s: (modelopt_fake_quant(a[0], s),))
            hooked.add(stored)
    if any(k.endswith(".input_scale") and k[: -len(".input_scale")] not in hooked for k in t):
        return None
    with torch.no_grad():
        return m(input_ids=torch.tensor([prompt])).logits[0].double()


def compare_exports(mo_dir, fp_dir):
    """Rows of (what, compared, identical, note) and a list of mismatch lines."""
    mo, fp = load_tensors(mo_dir), load_tensors(fp_dir)
    rows, problems = {}, []
    only_mo, only_fp = sorted(set(mo) - set(fp)), sorted(set(fp) - set(mo))
    if only_mo:
        problems.append(f"only in ModelOpt's export: {only_mo[:8]}{' ...' if len(only_mo) > 8 else ''}")
    if only_fp:
        problems.append(f"only in fp4lm's export: {only_fp[:8]}{' ...' if len(only_fp) > 8 else ''}")

    def kind(k):
        for s in ("weight_scale_2", "weight_scale", "input_scale"):
            if k.endswith("." + s):
                return s
        base = k[: -len(".weight")]
        return "weight (codes)" if base + ".weight_scale" in mo else "unquantized"

    in_rel = 0.0
    for k in sorted(set(mo) & set(fp)):
        a, b = mo[k], fp[k]
        what = kind(k)
        r = rows.setdefault(what, [0, 0])
        r[0] += 1
        same = a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(raw_bytes(a), raw_bytes(b))
        if same:
            r[1] += 1
        elif what == "input_scale" and a.numel() == 1 and b.numel() == 1:
            in_rel = max(in_rel, abs(a.float().item() - b.float().item()) / abs(a.float().item()))
        else:
            detail = f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
            if a.dtype == b.dtype and a.shape == b.shape:
                ne = (raw_bytes(a) != raw_bytes(b)).sum().item()
                detail += f": {ne} of {raw_bytes(a).numel()} bytes differ"
            problems.append(f"{k} ({what}): {detail}")
    table = []
    for what in ("weight (codes)", "weight_scale", "weight_scale_2", "input_scale", "unquantized"):
        if what in rows:
            n, same = rows[what]
            note = f"max relative diff {in_rel:.2g}" if what == "input_scale" and same < n else ""
            table.append((what, n, same, note))
    return table, problems


def exercised(d):
    """What the adversarial weights reached in an export: the rules a bit-identical result covers."""
    t = load_tensors(d)
    sc = torch.cat([v.view(torch.uint8).flatten() for k, v in t.items() if k.endswith(".weight_scale")])
    codes = torch.cat([v.flatten() for k, v in t.items() if k + "_scale" in t and k.endswith(".weight")])
    nib = torch.cat([codes & 0xF, codes >> 4])
    s2 = [v.item() for k, v in t.items() if k.endswith(".weight_scale_2")]
    return (f"exercised: {sc.numel()} block scales, {(sc < 8).sum().item()} E4M3 subnormal "
            f"({(sc == 1).sum().item()} at the 2^-9 clamp), {(sc == 0x38).sum().item()} equal to 1.0; "
            f"{nib.numel()} codes, {(nib == 8).sum().item()} negative zero, {(nib & 7 == 7).sum().item()} at ±6; "
            f"weight_scale_2 = 1.0 in {s2.count(1.0)} tensors")


def json_diff(a, b, path=""):
    """Keys and values that differ between two JSON values (lists of exclusions compared as sets)."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in a:
                out.append(f"{p}: only in fp4lm ({json.dumps(b[k])})")
            elif k not in b:
                out.append(f"{p}: only in ModelOpt ({json.dumps(a[k])})")
            else:
                out += json_diff(a[k], b[k], p)
    elif isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        if set(a) != set(b):
            out.append(f"{path}: ModelOpt {sorted(set(a) - set(b))} / fp4lm {sorted(set(b) - set(a))} not in the other")
        elif a != b:
            out.append(f"{path}: same entries, different order")
    elif a != b:
        out.append(f"{path}: ModelOpt {json.dumps(a)} / fp4lm {json.dumps(b)}")
    return out


# nvidia-modelopt 0.47 maps module names back to the hub's (Nemotron-H: model. -> backbone.) by
# appending the sentinel ".\x00modelopt_name_sentinel" before its rename rules and stripping it
# after; NemotronH's rule (an unescaped "model." pattern) also rewrites the "modelo" inside the
# sentinel, so every exclusion ends in ".\x00backbone.pt_name_sentinel" and matches no module
# (quant_aware_conversion.py, build_reverse_name_mapper). Compared with that tail cut off.
def strip_name_sentinel(v, seen):
    if isinstance(v, dict):
        return {k: strip_name_sentinel(x, seen) for k, x in v.items()}
    if isinstance(v, list):
        return [strip_name_sentinel(x, seen) for x in v]
    if isinstance(v, str) and ".\x00" in v:
        seen.append(v)
        return v[: v.index(".\x00")]
    return v


def repair_name_sentinel(d):
    """Rewrites ModelOpt's two JSON files in d with the sentinel tails cut off; True if any."""
    seen = []
    for fn in ("hf_quant_config.json", "config.json"):
        path = os.path.join(d, fn)
        j = strip_name_sentinel(json.load(open(path)), seen)
        with open(path, "w") as f:
            json.dump(j, f, indent=2)
    return bool(seen)


def compare_json(mo_dir, fp_dir):
    out = []
    for fn, key in (("hf_quant_config.json", None), ("config.json", "quantization_config")):
        a = json.load(open(os.path.join(mo_dir, fn)))
        b = json.load(open(os.path.join(fp_dir, fn)))
        if key:
            a, b = a.get(key, {}), b.get(key, {})
        seen = []
        a = strip_name_sentinel(a, seen)
        diffs = [d for d in json_diff(a, b) if "producer" not in d]
        where = f"{fn}{':' + key if key else ''}"
        out += [f"{where}: {d}" for d in diffs]
        if seen:
            out.append(f"{where}: note: ModelOpt wrote {len(seen)} module names with its name-mapper's sentinel "
                       f"left in (e.g. {seen[0]!r}); compared with it cut off")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp4lm", default=os.path.join(os.path.dirname(__file__), "..", "build", "fp4lm"))
    ap.add_argument("--work", help="keep checkpoints here (default: a temporary directory)")
    ap.add_argument("--only", nargs="*",
                    help="cases to run: adversarial llama llama-f32 qwen3-moe gemma3 gemma3-vl gemma4 gemma4-moe "
                         "gemma4-moe-f32 gemma4-ple nemotron-h nemotron-h-moe nemotron-h-moe-f32")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--calib-samples", type=int, default=8)
    ap.add_argument("--calib-len", type=int, default=32)
    args = ap.parse_args()
    fp4lm = os.path.abspath(args.fp4lm)
    work = args.work or tempfile.mkdtemp(prefix="fp4lm-modelopt-")
    os.makedirs(work, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed)
    calib = [torch.randint(0, vt.COMMON["vocab_size"], (args.calib_len,), generator=g).tolist()
             for _ in range(args.calib_samples)]
    prompt = torch.randint(0, vt.COMMON["vocab_size"], (48,), generator=g).tolist()
    calib_path = os.path.join(work, "calib.jsonl")
    with open(calib_path, "w") as f:
        for ids in calib:
            f.write(json.dumps({"ids": ids}) + "\n")
    print(f"nvidia-modelopt {modelopt.__version__}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {len(calib)} calibration sequences of {args.calib_len} tokens")

    archs = {a[0]: a for a in vt.arch_configs()}
    cases = [("adversarial", "Llama", "W4A16_NVFP4", torch.float32),
             ("llama", "Llama", "NVFP4", torch.bfloat16),
             ("llama-f32", "Llama", "NVFP4", torch.float32),
             ("qwen3-moe", "Qwen3-MoE", "NVFP4", torch.bfloat16),
             ("gemma3", "Gemma3", "NVFP4", torch.bfloat16),
             ("gemma3-vl", "Gemma3 VL", "NVFP4", torch.bfloat16),
             ("gemma4", "Gemma4", "NVFP4", torch.bfloat16),
             ("gemma4-moe", "Gemma4 MoE", "NVFP4", torch.bfloat16),
             ("gemma4-moe-f32", "Gemma4 MoE", "NVFP4", torch.float32),
             ("gemma4-ple", "Gemma4 PLE+KV-sharing", "NVFP4", torch.bfloat16),
             ("nemotron-h", "Nemotron-H dense", "NVFP4", torch.bfloat16),
             ("nemotron-h-moe", "Nemotron-H MoE", "NVFP4", torch.bfloat16),
             ("nemotron-h-moe-f32", "Nemotron-H MoE", "NVFP4", torch.float32)]
    failed = False
    report = []
    for case, arch, algo, dtype in cases:
        if args.only and case not in args.only:
            continue
        name, cls_name, kwargs, model_cls = archs[arch]
        d = os.path.join(work, case)
        shutil.rmtree(d, ignore_errors=True)
        src, mo_dir, fp_dir = (os.path.join(d, x) for x in ("src", "modelopt", "fp4lm"))
        model = vt.write_checkpoint(name, cls_name, kwargs, model_cls, os.path.join(d, "tmp"), args.seed)
        if case == "adversarial":
            adversarial_weights(model, args.seed)
        model.to(dtype).save_pretrained(src)
        shutil.rmtree(os.path.join(d, "tmp"))
        model = getattr(transformers, model_cls).from_pretrained(src, dtype=dtype, attn_implementation="eager",
                                                                 experts_implementation="eager").eval()
        cfg = mtq.W4A16_NVFP4_CFG if algo == "W4A16_NVFP4" else mtq.NVFP4_DEFAULT_CFG
        with torch.no_grad():
            modelopt_export(model, cfg, calib, mo_dir)
        # rtn: ModelOpt's max calibration and amax/6 block scales, the export compared byte for byte.
        cmd = [fp4lm, "quantize", "--model", src, "--out", fp_dir, "--algo", algo, "--weight-method", "rtn",
               "--log-level", "warn"]
        if algo == "NVFP4":
            cmd += ["--calib-ids", calib_path, "--calib-samples", str(len(calib)), "--calib-seq-len",
                    str(args.calib_len)]
        vt.run(cmd)
        table, problems = compare_exports(mo_dir, fp_dir)
        if case == "adversarial":
            problems.append(exercised(fp_dir))
        problems += compare_json(mo_dir, fp_dir)
        weights_ok = all(same == n for what, n, same, _ in table if what != "input_scale")
        # Key sets and values must agree; the order of the exclusion lists does not matter.
        failed = failed or not weights_ok or any(".json" in p and "different order" not in p and ": note: " not in p
                                                 for p in problems)
        # ModelOpt's export in fp4lm vs transformers on ModelOpt's dequantized weights (and, for
        # W4A4, its static NVFP4 activation quantization), both float32.
        try:
            ref = reference_logits(mo_dir, src, model_cls, prompt)
            if ref is None:
                logits = ("not compared: an exported input_scale has no nn.Linear to hook in transformers "
                          "(transformers 5's fused MoE experts)")
            else:
                repaired = repair_name_sentinel(mo_dir)
                got = vt.fp4lm_logits(fp4lm, mo_dir, prompt, d)
                max_abs, rel, agree, _ = vt.compare(ref, got, 1.0)
                logits = f"max |diff| {max_abs:.3g} (relative {rel:.3g}), argmax agree {agree * 100:.1f}%"
                if repaired:
                    logits += " (ModelOpt's exclusion names cut at its sentinel first: as written they match no module)"
        except Exception as e:
            logits = f"ERROR: {e}"
        report.append((case, algo, table, problems, logits))

    for case, algo, table, problems, logits in report:
        print(f"\n### {case} ({algo})\n")
        print("| tensors | compared | bit-identical | note |")
        print("|---|---|---|---|")
        for what, n, same, note in table:
            print(f"| {what} | {n} | {same} | {note} |")
        for p in problems:
            print(f"- {p}")
        print(f"- fp4lm on ModelOpt's export vs transformers on ModelOpt's dequantized export (float32): {logits}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
