#!/usr/bin/env python3
"""Files written by compressed-tensors' own producer (llm-compressor), for comparing with
`fp4lm quantize --format compressed-tensors` and for loading in fp4lm (docs/FORMAT.md §9).

Needs a venv with the pinned scripts/requirements-ct.txt (llmcompressor pulls torch and
compressed-tensors; never part of CI):
  python3 -m venv .venv-ct && .venv-ct/bin/pip install -r scripts/requirements-ct.txt
  .venv-ct/bin/python scripts/ct_producers.py write --model M --out D --scheme NVFP4A16|NVFP4 \
      [--calib-ids FILE.jsonl] [--ignore NAME_OR_re:PATTERN ...]
  .venv-ct/bin/python scripts/ct_producers.py compare A B   # tensors, bytes and configs of two dirs
  .venv-ct/bin/python scripts/ct_producers.py to-modelopt CT OUT  # the same weights in ModelOpt's form
"""
import argparse
import json
import sys
from pathlib import Path


def read_ids(path, limit):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                v = json.loads(line)
                rows.append(v if isinstance(v, list) else v.get("prompt_ids", []) + v.get("greedy_continuation", []))
            if len(rows) == limit:
                break
    return rows


def write(a):
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="auto")
    recipe = QuantizationModifier(targets="Linear", scheme=a.scheme, ignore=a.ignore)
    kw = {}
    if a.calib_ids:
        ids = read_ids(a.calib_ids, a.calib_samples)
        # Token ids need no tokenizer, but oneshot wants a processor object when given a dataset.
        class NoTokenizer:
            pad_token_id = 0

            def save_pretrained(self, *_):
                pass

        kw = dict(dataset=Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}),
                  processor=NoTokenizer(),
                  num_calibration_samples=len(ids), max_seq_length=max(len(r) for r in ids),
                  shuffle_calibration_samples=False)
    oneshot(model=model, recipe=recipe, **kw)
    model.save_pretrained(a.out, save_compressed=True)
    print(json.dumps(json.load(open(Path(a.out) / "config.json"))["quantization_config"], indent=1))


def tensors(d):
    from safetensors import safe_open
    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        with safe_open(str(f), "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def compare(a):
    import torch
    ta, tb = tensors(a.a), tensors(a.b)
    only_a, only_b = sorted(set(ta) - set(tb)), sorted(set(tb) - set(ta))
    print(f"tensors: {len(ta)} in A, {len(tb)} in B; only in A: {only_a[:8]}{'...' if len(only_a) > 8 else ''}; "
          f"only in B: {only_b[:8]}{'...' if len(only_b) > 8 else ''}")
    by_suffix = {}
    for k in sorted(set(ta) & set(tb)):
        x, y = ta[k], tb[k]
        suffix = k.rsplit(".", 1)[-1]
        s = by_suffix.setdefault(suffix, {"tensors": 0, "meta_differ": [], "bytes": 0, "bytes_differ": 0,
                                          "tensors_differ": 0, "max_rel": 0.0})
        s["tensors"] += 1
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            s["meta_differ"].append(f"{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}")
            continue
        bx = x.contiguous().view(torch.uint8).flatten()
        by = y.contiguous().view(torch.uint8).flatten()
        d = int((bx != by).sum())
        s["bytes"] += bx.numel()
        s["bytes_differ"] += d
        s["tensors_differ"] += d > 0
        if d and x.dtype in (torch.float32, torch.bfloat16, torch.float16):
            rel = float(((x.float() - y.float()).abs() / y.float().abs().clamp_min(1e-30)).max())
            s["max_rel"] = max(s["max_rel"], rel)
    for suffix, s in sorted(by_suffix.items()):
        print(f"  .{suffix}: {s['tensors']} tensors, {s['tensors_differ']} differ, "
              f"{s['bytes_differ']} of {s['bytes']} bytes differ, max rel diff {s['max_rel']:.3g}"
              + (f"; dtype/shape differ: {s['meta_differ'][:3]}" if s["meta_differ"] else ""))
    ca = json.load(open(Path(a.a) / "config.json")).get("quantization_config")
    cb = json.load(open(Path(a.b) / "config.json")).get("quantization_config")

    def flat(v, p=""):
        if isinstance(v, dict):
            r = {}
            for k, x in v.items():
                r.update(flat(x, f"{p}.{k}" if p else k))
            return r
        return {p: v}

    fa, fb = flat(ca or {}), flat(cb or {})
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k, "<absent>") != fb.get(k, "<absent>"):
            print(f"  config {k}: A {json.dumps(fa.get(k, '<absent>'))} B {json.dumps(fb.get(k, '<absent>'))}")


def to_modelopt(a):
    """compressed-tensors NVFP4 -> ModelOpt names: weight_packed -> weight, the reciprocal globals
    g -> 1/g as float32 0-d tensors (weight_scale_2, input_scale), hf_quant_config.json written."""
    import shutil
    import torch
    from safetensors.torch import save_file
    src, dst = Path(a.ct), Path(a.out)
    dst.mkdir(parents=True, exist_ok=True)
    out = {}
    for k, t in tensors(src).items():
        if k.endswith(".weight_packed"):
            out[k[: -len("_packed")]] = t
        elif k.endswith(".weight_global_scale"):
            out[k[: -len(".weight_global_scale")] + ".weight_scale_2"] = (1.0 / t.float()).reshape(())
        elif k.endswith(".input_global_scale"):
            out[k[: -len(".input_global_scale")] + ".input_scale"] = (1.0 / t.float()).reshape(())
        else:
            out[k] = t
    save_file({k: v.contiguous() for k, v in out.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(src / "config.json"))
    qc = cfg.pop("quantization_config")
    group = next(iter(qc["config_groups"].values()))
    algo = "NVFP4" if group.get("input_activations") else "W4A16_NVFP4"
    json.dump(cfg, open(dst / "config.json", "w"), indent=1)
    json.dump({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None,
               "group_size": 16, "exclude_modules": qc.get("ignore", [])}}, open(dst / "hf_quant_config.json", "w"),
              indent=1)
    for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (src / f).exists():
            shutil.copy(src / f, dst / f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--model", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--scheme", required=True, choices=["NVFP4", "NVFP4A16"])
    w.add_argument("--calib-ids")
    w.add_argument("--calib-samples", type=int, default=16)
    w.add_argument("--ignore", nargs="*", default=["lm_head"])
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    t = sub.add_parser("to-modelopt")
    t.add_argument("ct")
    t.add_argument("out")
    a = p.parse_args()
    {"write": write, "compare": compare, "to-modelopt": to_modelopt}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
