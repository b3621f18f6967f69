# Shared by the serving benchmarks (serve_bench.sh, replicas_bench.sh, pipeline_bench.sh): the
# build and Python they use, a scratch folder and the server they started (both cleaned up on
# exit), free ports, waiting for /health, and one scripts/loadtest.py run read into a row.
# Source it after `set -euo pipefail; cd` to the repository root, with BENCH_NAME set.
build=${BUILD:-build}
py=${PYTHON:-$build/pyvenv/bin/python}
tokens=${TOKENS:-32}
[ -x "$py" ] || { echo "$BENCH_NAME: no Python with httpx at $py (run make test, or set PYTHON)" >&2; exit 2; }
work=$(mktemp -d "/tmp/fp4lm-$BENCH_NAME.XXXXXX")
pid=""
stop_signal=${stop_signal:-TERM}
cleanup() { [ -n "$pid" ] && kill -"$stop_signal" "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_health() {  # wait_health PORT [TRIES of 0.2 s]
  for _ in $(seq 1 "${2:-900}"); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.2; done
  echo "$BENCH_NAME: nothing answers on port $1" >&2
  exit 1
}
# load_row PORT CONCURRENCY ROUNDS -> "tok/s ttft_p50 ttft_p99 itl_p50 itl_p99 lost" (16-token prompts,
# $tokens greedy tokens each).
load_row() {
  local out
  out=$("$py" scripts/loadtest.py --url "http://127.0.0.1:$1" --concurrency "$2" --rounds "$3" \
        --max-tokens "$tokens" --prompt-len 16 --timeout 1800 --json)
  "$py" -c 'import json,sys; o=json.loads(sys.argv[1]);
print(o["aggregate_tok_s"], o["ttft_p50_ms"], o["ttft_p99_ms"], o["itl_p50_ms"], o["itl_p99_ms"], o["lost"])' "$out"
}
ratio() { "$py" -c "print(f'{$1 / $2:.2f}')"; }  # ratio A B -> A/B, two decimals
