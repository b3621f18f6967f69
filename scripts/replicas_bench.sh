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
build=${BUILD:-build}
py=${PYTHON:-$build/pyvenv/bin/python}
threads=${THREADS:-2}
tokens=${TOKENS:-32}
rounds=${ROUNDS:-2}
levels=${LEVELS:-1 8}
[ -x "$py" ] || { echo "replicas_bench: no Python with httpx at $py (run make test, or set PYTHON)" >&2; exit 2; }
half=$((threads / 2 > 0 ? threads / 2 : 1))
work=$(mktemp -d /tmp/fp4lm-replicas-bench.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_health() {
  for _ in $(seq 1 900); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.2; done
  echo "replicas_bench: nothing answers on port $1" >&2
  exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=""; }

"$build/bench/decode_bench" --arch dense --layers 4 --tokens 8 --threads "$threads" --dir "$work/dense" >/dev/null
serve=(--model "$work/dense" --max-num-seqs 16 --max-model-len 128 --log-level warn)

echo "uptime before: $(uptime)"
printf '%-10s %-5s %-10s %-9s %-10s %-10s %-10s %s\n' setup conc "tok/s" "x direct" "TTFT p50" "ITL p50" "ITL p99" lost
declare -A base
row() {  # row NAME PORT
  local c out tps t50 i50 i99 lost
  for c in $levels; do
    out=$("$py" scripts/loadtest.py --url "http://127.0.0.1:$2" --concurrency "$c" --rounds "$rounds" \
          --max-tokens "$tokens" --prompt-len 16 --timeout 1800 --json)
    read -r tps t50 i50 i99 lost < <("$py" -c 'import json,sys; o=json.loads(sys.argv[1]);
print(o["aggregate_tok_s"], o["ttft_p50_ms"], o["itl_p50_ms"], o["itl_p99_ms"], o["lost"])' "$out")
    [ -n "${base[$c]:-}" ] || base[$c]=$tps
    printf '%-10s %-5s %-10s %-9s %-10s %-10s %-10s %s\n' "$1" "$c" "$tps" \
      "$("$py" -c "print(f'{$tps / ${base[$c]}:.2f}')")" "${t50}ms" "${i50}ms" "${i99}ms" "$lost"
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
