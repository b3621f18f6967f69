#!/usr/bin/env python3
"""torch.matmul in bfloat16 on the shapes of `fp4lm bench kernels --shapes full` (the baseline of
issue 46: what vLLM's and SGLang's CPU backends run through oneDNN), GFLOP/s per shape and M.

Not in CI (torch is multi-GB). Run it from a venv that has torch, in the same session as the fp4lm
figures it is compared with, e.g.
  /work/venvs/torch46/bin/python scripts/bench_torch_bf16.py --threads 2 --m 16,64,256,1024
y[m, n] = x[m, k] @ W[n, k]^T, x and W bfloat16 (as F.linear), best of --reps timed calls after a
warm-up, each call at least ~0.2 s of work. --cpu-time (with --threads 1: oneDNN then runs on the
calling thread) times by the thread's CPU time instead of the wall clock, as kernel_core_bench does,
so the per-core figures compare on a shared, loaded machine.
"""
import argparse
import time

import torch

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (1536, 2048), (2048, 768)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--m", default="16,64,256,1024")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default="", help="N x K list, e.g. 4304x1152,1152x4304 (default: the Llama shapes)")
    ap.add_argument("--cpu-time", action="store_true", help="thread CPU time (needs --threads 1)")
    a = ap.parse_args()
    if a.cpu_time and a.threads != 1:
        ap.error("--cpu-time measures the calling thread only: use --threads 1")
    clock = time.thread_time if a.cpu_time else time.perf_counter
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads, bfloat16, "
          f"mkldnn bf16 supported: {torch.backends.mkldnn.is_available()}, "
          f"{'thread CPU time' if a.cpu_time else 'wall clock'}")
    print(f"{'N':>6} {'K':>6} {'M':>5} | {'ms':>9} {'GFLOP/s':>8}")
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")] if a.shapes else SHAPES
    for n, k in shapes:
        w = torch.randn(n, k, dtype=torch.bfloat16)
        for m in [int(v) for v in a.m.split(",")]:
            x = torch.randn(m, k, dtype=torch.bfloat16)
            flop = 2.0 * m * n * k
            torch.nn.functional.linear(x, w)  # warm-up (oneDNN primitive creation)
            calls = max(1, int(2e8 / flop * 50))
            best = 1e30
            for _ in range(a.reps):
                t0 = clock()
                for _ in range(calls):
                    torch.nn.functional.linear(x, w)
                best = min(best, (clock() - t0) / calls)
            print(f"{n:>6} {k:>6} {m:>5} | {best * 1e3:9.3f} {flop / best / 1e9:8.1f}", flush=True)


if __name__ == "__main__":
    main()
