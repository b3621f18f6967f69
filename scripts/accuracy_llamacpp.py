"""llama.cpp's rows of docs/ACCURACY.md's real-text table (run by scripts/accuracy_smollm2.sh in a
venv with llama-cpp-python and numpy, pinned there).

llama.cpp's own quantizer (llama_model_quantize) makes an F16 GGUF from the SmolLM2 GGUF (its
Q4_1 weights dequantized, allow_requantize), then each quantized type from that F16 file. Each
file scores the same token sequences fp4lm scores (ids.jsonl, no BOS added) with every position's
logits (logits_all), and is compared with fp4lm's bf16 logits of those sequences (bf16.jsonl,
`fp4lm eval --dump-logits`) exactly as `fp4lm eval --reference` compares: per sequence of n tokens,
the n - 1 positions that predict a token; perplexity = exp(mean NLL), mean KL(bf16 || variant),
top-1 agreement.

Usage: accuracy_llamacpp.py SOURCE.gguf WORKDIR ids.jsonl bf16.jsonl
Prints one Markdown table row per type.
"""
import ctypes
import json
import os
import sys

import numpy as np
import llama_cpp

# llama.cpp's file types (llama.h LLAMA_FTYPE_MOSTLY_*).
TYPES = [("F16", 1), ("Q8_0", 7), ("Q4_K_M", 15), ("Q4_0", 2), ("IQ4_NL", 25)]


def quantize(src, dst, ftype):
    if os.path.exists(dst):
        return
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.allow_requantize = True
    p.nthread = os.cpu_count() or 2
    rc = llama_cpp.llama_model_quantize(src.encode(), (dst + ".tmp").encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize({src} -> {dst}, ftype {ftype}) failed: {rc}")
    os.replace(dst + ".tmp", dst)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    src, work, ids_path, ref_path = sys.argv[1:5]
    seqs = []
    with open(ids_path) as f:
        for line in f:
            seqs.append(json.loads(line)["ids"])
    n_ctx = max(len(s) for s in seqs)
    f16 = os.path.join(work, "smollm2-f16.gguf")
    quantize(src, f16, 1)
    files = {}
    for name, ftype in TYPES:
        path = f16 if ftype == 1 else os.path.join(work, f"smollm2-{name}.gguf")
        quantize(f16, path, ftype)
        files[name] = path
    stats = {name: {"nll": 0.0, "kl": 0.0, "top1": 0, "n": 0} for name, _ in TYPES}
    models = {}
    for name, _ in TYPES:
        models[name] = llama_cpp.Llama(model_path=files[name], n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                       logits_all=True, verbose=False, n_threads=os.cpu_count() or 2)
    with open(ref_path) as f:
        for k, line in enumerate(f):
            rec = json.loads(line)
            ids = rec["ids"]
            if ids != seqs[k]:
                sys.exit(f"{ref_path}: sequence {k} holds other ids than {ids_path}")
            n = len(ids) - 1
            ref = log_softmax(np.asarray(rec["logits"][:n], dtype=np.float32))
            del rec
            p_ref = np.exp(ref)
            tgt = np.asarray(ids[1:])
            for name, _ in TYPES:
                llm = models[name]
                llm.reset()
                llm.eval(ids[:n])
                lq = log_softmax(np.asarray(llm.scores[:n], dtype=np.float32))
                s = stats[name]
                s["nll"] -= lq[np.arange(n), tgt].sum()
                s["kl"] += np.maximum(0.0, (p_ref * (ref - lq)).sum(axis=-1)).sum()
                s["top1"] += int((lq.argmax(axis=-1) == ref.argmax(axis=-1)).sum())
                s["n"] += n
            print(f"accuracy_llamacpp: sequence {k + 1}/{len(seqs)} scored", file=sys.stderr)
    for name, _ in TYPES:
        s = stats[name]
        size = os.path.getsize(files[name]) / 2**20
        print("| llama.cpp %s (%.0f MiB) | %.4f | %.5f | %.4f |" % (
            name, size, np.exp(s["nll"] / s["n"]), s["kl"] / s["n"], s["top1"] / s["n"]))


if __name__ == "__main__":
    main()
