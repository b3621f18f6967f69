#!/usr/bin/env bash
# Prefix-caching benchmark (docs/BENCHMARKS.md, "Prefix caching"): `fp4lm serve` on
# decode_bench's synthetic checkpoint (Llama-3-8B shapes by default, LAYERS decoder layers), a
# SYSTEM-token shared system prompt followed by a QUESTION-token question, max_tokens 1, so a
# request's latency is its time to first token. Cold: a system prompt the server has never seen
# (a fresh one each run); hit: the same system prompt as the run before, another question.
# Prints each run's TTFT and the ratio of the median hit to the median cold TTFT.
#
#   bash scripts/prefix_cache_bench.sh          # after `make build`
#   ARCH=hybrid LAYERS=4 RUNS=2 bash scripts/prefix_cache_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
arch=${ARCH:-dense}
layers=${LAYERS:-2}
threads=${THREADS:-2}
system=${SYSTEM:-2000}
question=${QUESTION:-20}
runs=${RUNS:-3}
work=$(mktemp -d /tmp/fp4lm-prefix-bench.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "uptime before: $(uptime)"
"${DECODE_BENCH:-$build/bench/decode_bench}" --arch "$arch" --layers "$layers" --tokens 2 --prompt 4 --threads "$threads" \
  --dir "$work/model" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/fp4lm" serve --model "$work/model" --port "$port" --enable-prompt-tokens-details --max-num-seqs 4 --max-num-batched-tokens 512 \
  --max-model-len $((system + question + 8)) --threads "$threads" --log-level warn ${SERVE_FLAGS:-} &
pid=$!
for _ in $(seq 1 1200); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.2
done
python3 - "$port" "$system" "$question" "$runs" <<'EOF'
import json, random, statistics, sys, time, urllib.request
port, system, question, runs = (int(a) for a in sys.argv[1:])
rng = random.Random(1)
def ids(n):
    return [rng.randrange(3, 30000) for _ in range(n)]
def ttft(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        usage = json.load(r)["usage"]
    return time.perf_counter() - t0, (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
cold, hit = [], []
for i in range(runs):
    sys_prompt = ids(system)                     # never seen: cold
    t, c = ttft(sys_prompt + ids(question))
    cold.append(t)
    print(f"run {i}: cold {t * 1000:.1f} ms (cached {c})", flush=True)
    t, c = ttft(sys_prompt + ids(question))      # same system prompt, another question: hit
    hit.append(t)
    print(f"run {i}: hit  {t * 1000:.1f} ms (cached {c})", flush=True)
mc, mh = statistics.median(cold), statistics.median(hit)
print(f"TTFT median: cold {mc * 1000:.1f} ms, hit {mh * 1000:.1f} ms, hit/cold {mh / mc:.4f}")
EOF
echo "uptime after: $(uptime)"
