#!/usr/bin/env bash
# Pipeline-parallel benchmark (docs/BENCHMARKS.md, "Pipeline parallelism over MPI"): decode_bench's
# synthetic Llama-3-8B-shape NVFP4 checkpoint (4 layers) served by 1, 2 and 3 ranks on this one
# machine (`mpirun -np N fp4lm serve --pipeline-parallel-size N`, one thread per rank), each
# driven by scripts/loadtest.py at concurrency 1 (single-stream latency) and 8 (throughput), 16-token
# prompts, TOKENS greedy tokens, ROUNDS rounds; and each rank's peak RSS (VmHWM) at the end.
# The 1-rank row is a plain `fp4lm serve` (the ratio column's baseline). On one machine the ranks
# share its cores and memory bandwidth, so this measures what the pipeline costs, not what
# machines would add.
#
#   bash scripts/pipeline_bench.sh     # after `make build` and one `make test` (the venv, httpx)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-2}
levels=${LEVELS:-1 8}
BENCH_NAME=pipeline_bench stop_signal=KILL
source scripts/serve_bench_lib.sh
command -v mpirun >/dev/null || { echo "pipeline_bench: no mpirun (bash scripts/setup.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$build/bench/decode_bench" --arch dense --layers 4 --tokens 8 --threads 1 --dir "$work/dense" >/dev/null
serve=(serve --model "$work/dense" --max-num-seqs 16 --max-model-len 128 --threads 1 --log-level info)

echo "uptime before: $(uptime)"
printf '%-7s %-5s %-10s %-9s %-10s %-10s %s\n' ranks conc "tok/s" "x 1 rank" "TTFT p50" "ITL p50" lost
declare -A base
for n in 1 2 3; do
  port=$(free_port)
  if [ "$n" = 1 ]; then
    "$build/fp4lm" "${serve[@]}" --port "$port" 2>"$work/serve-$n.log" &
  else
    mpirun --oversubscribe -np "$n" "$build/fp4lm" "${serve[@]}" --port "$port" --pipeline-parallel-size "$n" \
      2>"$work/serve-$n.log" &
  fi
  pid=$!
  wait_health "$port" 1500
  for c in $levels; do
    read -r tps t50 _ i50 _ lost < <(load_row "$port" "$c" "$rounds")
    [ -n "${base[$c]:-}" ] || base[$c]=$tps
    printf '%-7s %-5s %-10s %-9s %-10s %-10s %s\n' "$n" "$c" "$tps" "$(ratio "$tps" "${base[$c]}")" "${t50}ms" "${i50}ms" "$lost"
  done
  # Each rank's peak RSS; the ranks are mpirun's children (or the one serve process).
  ranks=$pid
  [ "$n" = 1 ] || ranks=$(pgrep -P "$pid" | paste -sd' ')
  for r in $ranks; do echo "  pid $r peak RSS: $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' /proc/$r/status)"; done
  grep -h "pipeline stage" "$work/serve-$n.log" | sed 's/^/  /' || true
  if [ "$n" = 1 ]; then kill -TERM "$pid"; else kill -TERM $(pgrep -P "$pid" | head -1); fi
  wait "$pid" || true
  pid=""
done
echo "uptime after: $(uptime)"
