#!/usr/bin/env python3
"""Interleaved A/B of kernel_core_bench binaries on a noisy machine (not in CI).

Runs each binary in turn, `reps` times, on one shape and token count, and prints per backend the
best (noise only slows a run down), upper quartile and median of the per-core G multiply-adds/s.

  python3 scripts/kernel_ab.py --reps 8 --n 2048 --k 2048 --m 8 \
      --backends cpu_w4a16_avx512,cpu_w4a4_avx512 before=/tmp/kcb_old after=build/bench/kernel_core_bench
"""
import argparse
import re
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--n", default="2048")
    ap.add_argument("--k", default="2048")
    ap.add_argument("--m", default="8")
    ap.add_argument("--backends", default="cpu_w4a16_avx512,cpu_w4a4_avx512")
    ap.add_argument("binaries", nargs="+", help="label=path of a kernel_core_bench binary")
    a = ap.parse_args()
    backends = a.backends.split(",")
    runs = [b.split("=", 1) for b in a.binaries]
    got = {(label, be): [] for label, _ in runs for be in backends}
    for _ in range(a.reps):
        for label, path in runs:
            out = subprocess.run([path, "--n", a.n, "--k", a.k, "--m", a.m, "--backends", a.backends],
                                 capture_output=True, text=True, check=True).stdout
            for be in backends:
                m = re.search(re.escape(be) + r" +([0-9.]+)", out)
                if not m:
                    raise SystemExit(f"{path}: no figure for {be} in:\n{out}")
                got[(label, be)].append(float(m.group(1)))
    print(f"n {a.n}, k {a.k}, m {a.m}, {a.reps} interleaved runs each (G multiply-adds/s per core)")
    for (label, be), v in got.items():
        v.sort()
        print(f"{label:10s} {be:20s} best {v[-1]:6.1f}  q75 {v[len(v) * 3 // 4]:6.1f}  median {statistics.median(v):6.1f}")


if __name__ == "__main__":
    main()
