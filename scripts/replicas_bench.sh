#!/usr/bin/env bash
# Replica benchmark (docs/BENCHMARKS.md, "Replicas behind nginx"): decode_bench's synthetic
# Llama-3-8B-shape NVFP4 checkpoint (4 layers) served three ways, each driven by
# scripts/loadtest.py at concurrency 1 and 8 (16-token prompts, TOKENS greedy tokens, ROUNDS rounds):
#   direct      one `fp4lm serve --threads THREADS`, no balancer (the baseline of the ratio column)
#   nginx x1    the same one replica behind nginx (scripts/replicas.sh --replicas 1): the balancer's cost
#   nginx x2    two replicas with THREADS/2 threads each behind nginx (scripts/replicas.sh --replicas 2)
# On one machine the two replicas share its cores and memory bandwidth, so x2 cannot beat direct
# there; the rows measure what the balancer costs, not what a second machine would add. Then
# nginx's cost per request on its own (one-token requests alternating direct / through nginx).
#
#   bash scripts/replicas_bench.sh     # after `make build` and one `make test` (the venv, httpx)
#   THREADS=2 TOKENS=32 ROUNDS=2 bash scripts/replicas_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
levels=${LEVELS:-1 8}
BENCH_NAME=replicas_bench
source scripts/serve_bench_lib.sh
half=$((threads / 2 > 0 ? threads / 2 : 1))
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=""; }

"$build/bench/decode_bench" --arch dense --layers 4 --tokens 8 --threads "$threads" --dir "$work/dense" >/dev/null
serve=(--model "$work/dense" --max-num-seqs 16 --max-model-len 128 --log-level warn)

echo "uptime before: $(uptime)"
printf '%-10s %-5s %-10s %-9s %-10s %-10s %-10s %s\n' setup conc "tok/s" "x direct" "TTFT p50" "ITL p50" "ITL p99" lost
declare -A base
row() {  # row NAME PORT
  local c tps t50 i50 i99 lost
  for c in $levels; do
    read -r tps t50 _ i50 i99 lost < <(load_row "$2" "$c" "$rounds")
    [ -n "${base[$c]:-}" ] || base[$c]=$tps
    printf '%-10s %-5s %-10s %-9s %-10s %-10s %-10s %s\n' "$1" "$c" "$tps" "$(ratio "$tps" "${base[$c]}")" \
      "${t50}ms" "${i50}ms" "${i99}ms" "$lost"
  done
}

port=$(free_port)
"$build/fp4lm" serve "${serve[@]}" --port "$port" --threads "$threads" &
pid=$!
wait_health "$port"
row direct "$port"
stop

for n in 1 2; do
  port=$(free_port)
  t=$threads
  [ "$n" = 2 ] && t=$half
  bash scripts/replicas.sh --replicas "$n" --port "$port" --replica-ports "$(for i in $(seq "$n"); do free_port; done | paste -sd,)" \
    --fp4lm "$build/fp4lm" -- "${serve[@]}" --threads "$t" 2>"$work/replicas-$n.log" &
  pid=$!
  wait_health "$port"
  row "nginx x$n" "$port"
  stop
done

# nginx's cost per request, measured so that load drift cancels: a tiny model (one token per
# request, ~1 ms of engine work), one replica, REQUESTS requests alternating direct / through nginx
# on kept-alive connections; medians and p90 of each.
"$build/fp4lm" synth --out "$work/tiny" --arch LlamaForCausalLM >/dev/null
port=$(free_port)
rport=$(free_port)
bash scripts/replicas.sh --replicas 1 --port "$port" --replica-ports "$rport" --fp4lm "$build/fp4lm" -- \
  --model "$work/tiny" --threads 1 --log-level warn 2>"$work/replicas-tiny.log" &
pid=$!
wait_health "$port"
"$py" - "$rport" "$port" "${REQUESTS:-400}" <<'PY'
import statistics, sys, time
import httpx
direct, lb, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = {"prompt": [5, 6, 7], "max_tokens": 1, "temperature": 0}
times = {"direct": [], "nginx": []}
with httpx.Client(timeout=60) as c:
    for i in range(n):
        for name, port in (("direct", direct), ("nginx", lb))[:: 1 if i % 2 == 0 else -1]:
            t0 = time.perf_counter()
            r = c.post(f"http://127.0.0.1:{port}/v1/completions", json=body)
            times[name].append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
for name, xs in times.items():
    xs.sort()
    print(f"{name:7s} one-token request: median {statistics.median(xs) * 1e3:.3f} ms, "
          f"p90 {xs[int(0.9 * len(xs))] * 1e3:.3f} ms ({len(xs)} requests)")
print(f"nginx adds {(statistics.median(times['nginx']) - statistics.median(times['direct'])) * 1e3:.3f} ms "
      "per request (median difference)")
PY
stop
echo "uptime after: $(uptime)"
