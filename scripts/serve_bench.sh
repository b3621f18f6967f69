#!/usr/bin/env bash
# Serving benchmark (docs/BENCHMARKS.md, "Serving"): `fp4lm serve` on decode_bench's synthetic
# Qwen3-30B-A3B-shape (moe) and Llama-3-8B-shape (dense) NVFP4 checkpoints (4 layers), driven by
# scripts/loadtest.py at concurrency 1, 4, 8, 16 (one round, 16-token prompts, 32 greedy tokens
# each). Prints one table row per run: aggregate decode tokens/s, its ratio to concurrency 1,
# p50/p99 TTFT and inter-token latency, and decode_bench's own single-sequence ms/step (the
# server's overhead is ITL p50 at concurrency 1 minus that).
#
#   bash scripts/serve_bench.sh            # after `make build` and one `make test` (for the venv)
#   ARCHS=dense LEVELS="1 8" THREADS=2 TOKENS=32 bash scripts/serve_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
levels=${LEVELS:-1 4 8 16}
archs=${ARCHS:-dense moe}
BENCH_NAME=serve_bench
source scripts/serve_bench_lib.sh

echo "uptime: $(uptime)"
printf '%-6s %-5s %-12s %-7s %-10s %-10s %-10s %-10s %s\n' model conc "tok/s" "x c=1" "TTFT p50" "TTFT p99" \
  "ITL p50" "ITL p99" "lost"
for arch in $archs; do
  step=$("$build/bench/decode_bench" --arch "$arch" --layers 4 --tokens 24 --threads "$threads" --dir "$work/$arch" |
         sed -n 's/.*steps; \([0-9.]*\) ms\/step.*/\1/p')
  port=$(free_port)
  "$build/fp4lm" serve --model "$work/$arch" --port "$port" --max-num-seqs 16 --max-model-len 128 \
    --threads "$threads" --log-level warn &
  pid=$!
  wait_health "$port" 600
  base=""
  for c in $levels; do
    read -r tps t50 t99 i50 i99 lost < <(load_row "$port" "$c" 1)
    [ -z "$base" ] && base=$tps
    printf '%-6s %-5s %-12s %-7s %-10s %-10s %-10s %-10s %s\n' "$arch" "$c" "$tps" "$(ratio "$tps" "$base")" "${t50}ms" \
      "${t99}ms" "${i50}ms" "${i99}ms" "$lost"
  done
  echo "$arch: decode_bench single sequence ${step} ms/step (same machine, same threads)"
  kill -TERM "$pid"
  wait "$pid"
  pid=""
  rm -rf "${work:?}/$arch"
done
