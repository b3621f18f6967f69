#!/usr/bin/env bash
# Reruns two third-party server test suites against `fp4lm serve`, as a user would point them at
# an external server (docs/SERVER_SUITES.md has the last results and what each failure means):
# - llama.cpp's tools/server/tests (from llama-cpp-python 0.3.36's sdist, which vendors llama.cpp),
#   run unchanged with its own switch for an external server (DEBUG_EXTERNAL=1 PORT=...);
# - vLLM 0.34.0's tests/entrypoints/openai files that talk to a server over HTTP, run with
#   scripts/third_party_suites/vllm_shim.py (starts fp4lm serve where they start vllm serve;
#   stands in for their vllm/torch imports).
# The suites are fetched at run time (pinned by sha256) into $SUITES_DIR, never copied into the
# repository. The model is SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh) converted and quantized
# to W4A16_NVFP4, or $FP4LM_SUITE_MODEL. Usage: scripts/third_party_server_suites.sh [FP4LM] [llama|vllm|both]
# Environment: SUITES_DIR, FP4LM_SUITE_MODEL, LLAMA_SUITE_PORT (18080), SUITE_TEST_TIMEOUT (300 s per
# vLLM test), VLLM_SUITE_FILES (a subset of the vLLM files, e.g. "models/test_models.py").
set -euo pipefail
FP4LM=$(realpath "${1:-build/fp4lm}")
WHICH=${2:-both}
HERE=$(cd "$(dirname "$0")" && pwd)
W=${SUITES_DIR:-/tmp/fp4lm-suites}
mkdir -p "$W/logs"
LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz
LLAMA_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
VLLM_SDIST=vllm-0.34.0.tar.gz
VLLM_SHA=fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113
VLLM_URL=https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/$VLLM_SDIST

[ -x "$W/venv/bin/python" ] || /usr/bin/python3 -m venv "$W/venv"
"$W/venv/bin/pip" install --quiet -r "$HERE/third_party_suites/requirements.txt"
PY=$W/venv/bin/python

if [ ! -f "$W/$LLAMA_SDIST" ]; then
  "$W/venv/bin/pip" download --quiet --no-deps --no-build-isolation --no-binary llama-cpp-python \
    llama-cpp-python==0.3.36 -d "$W"
fi
[ -f "$W/$VLLM_SDIST" ] || curl -sSfL -o "$W/$VLLM_SDIST" "$VLLM_URL"
echo "$LLAMA_SHA  $W/$LLAMA_SDIST" | sha256sum --check --quiet -
echo "$VLLM_SHA  $W/$VLLM_SDIST" | sha256sum --check --quiet -
LT=$W/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/tests
VT=$W/vllm-0.34.0/tests
[ -d "$LT" ] || tar xzf "$W/$LLAMA_SDIST" -C "$W" llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/tests
[ -d "$VT/entrypoints/openai" ] || tar xzf "$W/$VLLM_SDIST" -C "$W" vllm-0.34.0/tests/__init__.py \
  vllm-0.34.0/tests/entrypoints/__init__.py vllm-0.34.0/tests/entrypoints/conftest.py \
  vllm-0.34.0/tests/entrypoints/openai

MODEL=${FP4LM_SUITE_MODEL:-$W/smollm2-135m-instruct-w4a16-nvfp4}
if [ ! -f "$MODEL/config.json" ]; then
  GGUF=$(bash "$HERE/fetch_smollm2.sh")
  "$FP4LM" --log-level warn convert --gguf "$GGUF" --out "$W/smollm2-hf"
  "$FP4LM" --log-level warn quantize --model "$W/smollm2-hf" --out "$MODEL" --algo W4A16_NVFP4
fi

summary() {  # junit xml -> one line of counts
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[2]).getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
t, f, e, k = (int(s.get(x, 0)) for x in ("tests", "failures", "errors", "skipped"))
print(f"{sys.argv[1]}: {t} tests, {t - f - e - k} passed, {f} failed, {e} errors, {k} skipped")
with open(sys.argv[2].replace(".xml", "-failures.txt"), "w") as out:  # one line per failure
    for c in r.iter("testcase"):
        for bad in list(c.findall("failure")) + list(c.findall("error")):
            msg = (bad.get("message") or "").splitlines()
            out.write(f"{c.get('classname')}::{c.get('name')} | {msg[0][:200] if msg else ''}\n")
PYEOF
}

if [ "$WHICH" != vllm ]; then
  PORT=${LLAMA_SUITE_PORT:-18080}
  # As the suite's preset starts llama-server (utils.py, tinyllama2): --alias tinyllama-2 (the name
  # tests expect back) and a 512-token context (requests without max_tokens stop there).
  "$FP4LM" serve "$MODEL" --port "$PORT" --served-model-name tinyllama-2 \
    --max-model-len 512 --log-level warn >"$W/logs/llama-serve.log" 2>&1 &
  SERVE=$!
  trap 'kill $SERVE 2>/dev/null || true' EXIT
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null ||
    { echo "fp4lm serve did not start: $W/logs/llama-serve.log" >&2; exit 1; }
  # llama.cpp's own switch for a server it does not start; tests that reconfigure the server
  # (slots, context size, API key, other models) then see fp4lm's settings (docs/SERVER_SUITES.md).
  (cd "$LT" && DEBUG_EXTERNAL=1 PORT=$PORT "$PY" -m pytest unit -q -p no:cacheprovider \
     --junitxml="$W/llama.xml" >"$W/logs/llama-pytest.log" 2>&1) || true
  kill $SERVE; wait $SERVE 2>/dev/null || true
  trap - EXIT
  summary "llama.cpp tools/server/tests" "$W/llama.xml"
fi

if [ "$WHICH" != llama ]; then
  # The files whose tests talk to a server over HTTP (the others unit-test vLLM's Python classes).
  # Requests without max_tokens run to the context length (8192 in test_chat.py): on a small CPU a
  # test may take minutes; SUITE_TEST_TIMEOUT (seconds per test, pytest-timeout) bounds each.
  FILES=(models/test_models.py completion/test_completion.py chat_completion/test_chat.py
         chat_completion/test_chat_echo.py chat_completion/test_chat_logit_bias_validation.py
         chat_completion/test_logprob_token_ids.py chat_completion/test_enable_force_include_usage.py
         test_return_token_ids.py test_return_tokens_as_ids.py)
  [ -z "${VLLM_SUITE_FILES:-}" ] || read -r -a FILES <<<"$VLLM_SUITE_FILES"  # a subset, same form
  (cd "$W/vllm-0.34.0" && PYTHONPATH="$HERE/third_party_suites" FP4LM_BIN="$FP4LM" FP4LM_SUITE_MODEL="$MODEL" \
     FP4LM_SUITE_LOGS="$W/logs" "$PY" -m pytest -q -p vllm_shim -p no:cacheprovider -o asyncio_mode=auto \
     --timeout "${SUITE_TEST_TIMEOUT:-300}" \
     --rootdir=. "${FILES[@]/#/tests/entrypoints/openai/}" --junitxml="$W/vllm.xml" \
     >"$W/logs/vllm-pytest.log" 2>&1) || true
  summary "vLLM tests/entrypoints/openai (HTTP files)" "$W/vllm.xml"
fi
echo "logs and junit files: $W"
