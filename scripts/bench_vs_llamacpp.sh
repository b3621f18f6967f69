#!/usr/bin/env bash
# fp4lm vs llama.cpp decode/prompt throughput on the same shapes, one run (not in CI: it compiles
# llama.cpp through llama-cpp-python, ~10 min on 2 cores). Usage: scripts/bench_vs_llamacpp.sh [args
# of scripts/bench_vs_llamacpp.py]. Needs a Release build (build/bench/decode_bench).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FP4LM_LLAMACPP_VENV:-.venv-llamacpp}
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r scripts/bench_vs_llamacpp.requirements.txt
fi
uptime
exec "$VENV/bin/python" scripts/bench_vs_llamacpp.py "$@"
