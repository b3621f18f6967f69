#!/usr/bin/env python3
"""fp4lm vs llama.cpp (through llama-cpp-python), same shapes, same machine, one run.

Writes GGUF files with the layer shapes of fp4lm's decode_bench (Llama-3-8B dense or
Qwen3-30B-A3B MoE, --layers decoder layers, real vocabulary size) in llama.cpp's best 4-bit
format (Q4_0: its CPU backend repacks it for AVX-512/VNNI at load) and in its NVFP4 type when
the installed llama.cpp knows it. Weights are random bytes, as in decode_bench: speed does not
depend on values (random routers spread tokens over experts in both engines). Then, for each
engine and format: prompt tokens/s (one batch of --prompt tokens) and decode tokens/s (median
step of --tokens single-token steps), --threads threads. fp4lm figures come from
build/bench/decode_bench run in the same invocation.

Not in CI (llama-cpp-python compiles llama.cpp from source). Run: scripts/bench_vs_llamacpp.sh
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SHAPES = {
    # hidden, heads, kv_heads, head_dim, vocab, inter, experts, top_k
    "dense": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, vocab=128256, inter=14336, experts=0, top_k=0),
    "moe": dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, vocab=151936, inter=768, experts=128, top_k=8),
}

rng = np.random.default_rng(1)


def q4_0_blocks(shape, k):
    """Random Q4_0 rows: per 32 weights an f16 scale d then 16 nibble bytes; w = (q - 8) * d."""
    import gguf  # noqa: F401
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    nb = k // 32
    out = np.empty((rows, nb, 18), dtype=np.uint8)
    d = np.full((rows, nb), 0.22 / np.sqrt(k), dtype=np.float16)
    out[:, :, :2] = d.view(np.uint8).reshape(rows, nb, 2)
    out[:, :, 2:] = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
    return out.reshape(*shape[:-1], nb * 18)


def nvfp4_blocks(shape, k):
    """Random ggml NVFP4 rows: per 64 weights 4 UE4M3 scales then 32 code bytes."""
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    nb = k // 64
    out = np.empty((rows, nb, 36), dtype=np.uint8)
    # E4M3 bytes around 2^-4 .. 2^-3 (exponent field 3..4): no NaN codes.
    out[:, :, :4] = rng.integers(0x18, 0x28, size=(rows, nb, 4), dtype=np.uint8)
    out[:, :, 4:] = rng.integers(0, 256, size=(rows, nb, 32), dtype=np.uint8)
    return out.reshape(*shape[:-1], nb * 36)


def write_gguf(path, arch, layers, fmt):
    import gguf
    s = SHAPES[arch]
    qtype = gguf.GGMLQuantizationType.Q4_0 if fmt == "q4_0" else gguf.GGMLQuantizationType.NVFP4
    blocks = q4_0_blocks if fmt == "q4_0" else nvfp4_blocks
    name = "llama" if arch == "dense" else "qwen3moe"
    w = gguf.GGUFWriter(path, name)
    h, hd = s["hidden"], s["head_dim"]
    w.add_context_length(4096)
    w.add_embedding_length(h)
    w.add_block_count(layers)
    w.add_feed_forward_length(s["inter"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0 if arch == "dense" else 1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if fmt == "q4_0" else gguf.LlamaFileType.MOSTLY_NVFP4)
    if s["experts"]:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["top_k"])
        w.add_expert_feed_forward_length(s["inter"])
    # A placeholder SentencePiece vocabulary of the real size (ids are fed directly).
    n = s["vocab"]
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"\u2581t{i}" for i in range(n - len(toks))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * n)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def quant(tname, shape):
        data = blocks(shape, shape[-1])
        w.add_tensor(tname, data, raw_dtype=qtype)

    def f32(tname, shape, value=None):
        data = np.full(shape, value, dtype=np.float32) if value is not None else \
            (rng.standard_normal(shape) * 0.02).astype(np.float32)
        w.add_tensor(tname, data)

    emb = (rng.standard_normal((n, h)) * 0.02).astype(np.float16)
    w.add_tensor("token_embd.weight", emb)
    f32("output_norm.weight", (h,), 1.0)
    quant("output.weight", (n, h))
    qd, kvd = s["heads"] * hd, s["kv_heads"] * hd
    for i in range(layers):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", (h,), 1.0)
        f32(p + "ffn_norm.weight", (h,), 1.0)
        quant(p + "attn_q.weight", (qd, h))
        quant(p + "attn_k.weight", (kvd, h))
        quant(p + "attn_v.weight", (kvd, h))
        quant(p + "attn_output.weight", (h, qd))
        if s["experts"]:
            f32(p + "attn_q_norm.weight", (hd,), 1.0)
            f32(p + "attn_k_norm.weight", (hd,), 1.0)
            f32(p + "ffn_gate_inp.weight", (s["experts"], h))
            quant(p + "ffn_gate_exps.weight", (s["experts"], s["inter"], h))
            quant(p + "ffn_up_exps.weight", (s["experts"], s["inter"], h))
            quant(p + "ffn_down_exps.weight", (s["experts"], h, s["inter"]))
        else:
            quant(p + "ffn_gate.weight", (s["inter"], h))
            quant(p + "ffn_up.weight", (s["inter"], h))
            quant(p + "ffn_down.weight", (h, s["inter"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_llamacpp(path, threads, prompt, tokens, vocab):
    """Runs in a child process: returns (prompt tok/s, decode tok/s) or raises."""
    code = f"""
import json, statistics, time, llama_cpp
llm = llama_cpp.Llama(model_path={path!r}, n_threads={threads}, n_threads_batch={threads},
                      n_ctx={prompt + tokens + 8}, n_batch={prompt}, n_ubatch={prompt}, verbose=False)
import random
random.seed(1)
ids = [random.randrange(259, {vocab}) for _ in range({prompt})]
t0 = time.perf_counter(); llm.eval(ids); tp = time.perf_counter() - t0
steps = []
for i in range({tokens}):
    t = random.randrange(259, {vocab})
    t0 = time.perf_counter(); llm.eval([t]); steps.append(time.perf_counter() - t0)
rest = sorted(steps[min(4, len(steps) // 4):])
print(json.dumps({{"prompt_tok_s": {prompt} / tp, "decode_tok_s": 1.0 / rest[len(rest) // 2]}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_fp4lm(bench, arch, layers, threads, prompt, tokens, extra):
    cmd = [bench, "--arch", arch, "--layers", str(layers), "--threads", str(threads), "--tokens", str(tokens),
           "--prompt", str(prompt)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or r.stdout.strip())
    pre = re.search(r"prefill: (\d+) tokens at ([\d.]+) tok/s", r.stdout)
    dec = re.search(r"decode: ([\d.]+) tok/s", r.stdout)
    back = re.search(r"backends: (.*)", r.stdout)
    return {"prompt_tok_s": float(pre.group(2)), "decode_tok_s": float(dec.group(1)),
            "backends": back.group(1) if back else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["dense", "moe", "both"], default="both")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--bench", default="build/bench/decode_bench")
    ap.add_argument("--dir", default=None, help="where the GGUF files go (default: a temporary folder)")
    a = ap.parse_args()
    import llama_cpp
    print(f"llama-cpp-python {llama_cpp.__version__}; system info: {llama_cpp.llama_print_system_info().decode().strip()}")
    print(f"load before: {os.getloadavg()}")
    rows = []
    archs = ["dense", "moe"] if a.arch == "both" else [a.arch]
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for arch in archs:
            vocab = SHAPES[arch]["vocab"]
            for fmt in ["q4_0", "nvfp4"]:
                path = os.path.join(tmp, f"{arch}-{fmt}.gguf")
                try:
                    t0 = time.time()
                    write_gguf(path, arch, a.layers, fmt)
                    print(f"wrote {path} ({os.path.getsize(path) / 1e9:.2f} GB, {time.time() - t0:.0f} s)", flush=True)
                    res = run_llamacpp(path, a.threads, a.prompt, a.tokens, vocab)
                    rows.append((arch, f"llama.cpp {fmt.upper()}", res["prompt_tok_s"], res["decode_tok_s"], ""))
                except Exception as e:  # an older llama.cpp may not know NVFP4
                    rows.append((arch, f"llama.cpp {fmt.upper()}", None, None, f"failed: {e}"))
                if os.path.exists(path):
                    os.remove(path)
                print(rows[-1], flush=True)
            for label, extra in [("fp4lm NVFP4 W4A4", []),
                                 ("fp4lm NVFP4 W4A16 (override bf16)", ["--override-activation-dtype", "bfloat16"])]:
                try:
                    res = run_fp4lm(a.bench, arch, a.layers, a.threads, a.prompt, a.tokens, extra)
                    rows.append((arch, label, res["prompt_tok_s"], res["decode_tok_s"], res["backends"]))
                except Exception as e:
                    rows.append((arch, label, None, None, f"failed: {e}"))
                print(rows[-1], flush=True)
    print(f"load after: {os.getloadavg()}")
    print(f"\n{a.layers} layers, {a.threads} threads, prompt {a.prompt} tokens, decode {a.tokens} tokens\n")
    print("| shapes | engine / format | prompt tok/s | decode tok/s | note |")
    print("|---|---|---|---|---|")
    for arch, label, p, d, note in rows:
        f = lambda v: f"{v:.1f}" if v is not None else "—"
        print(f"| {'Llama-3-8B' if arch == 'dense' else 'Qwen3-30B-A3B'} | {label} | {f(p)} | {f(d)} | {note} |")


if __name__ == "__main__":
    main()
