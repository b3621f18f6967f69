#!/usr/bin/env bash
# Retakes docs/images/webui.png from a real conversation: SmolLM2-135M-Instruct (the demo's model,
# scripts/fetch_smollm2.sh) converted and quantized to W4A16_NVFP4 as the demo does, served by
# `fp4lm serve`, its chat page driven in headless chromium (scripts/webui_screenshot.py).
# Usage: bash scripts/webui_screenshot.sh [FP4LM_BIN] [OUT.png]. Needs chromium, chromium-driver
# (scripts/setup.sh) and a venv with tests/webui/requirements.txt (made here in build/pyvenv-webui).
set -euo pipefail
FP4LM=$(realpath "${1:-build/fp4lm}")
OUT=$(realpath -m "${2:-docs/images/webui.png}")
HERE=$(cd "$(dirname "$0")" && pwd)
VENV="$HERE/../build/pyvenv-webui"
"$HERE/../tests/python_helpers/make_venv.sh" "$VENV" "$HERE/../tests/webui/requirements.txt"
GGUF=$(bash "$HERE/fetch_smollm2.sh")
DIR=$(mktemp -d /tmp/fp4lm-webui.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$FP4LM" --log-level warn convert --gguf "$GGUF" --out "$DIR/hf"
"$FP4LM" --log-level warn quantize --model "$DIR/hf" --out "$DIR/q" --algo W4A16_NVFP4
"$VENV/bin/python" "$HERE/webui_screenshot.py" "$FP4LM" "$DIR/q" "$OUT" --name SmolLM2-135M-Instruct-W4A16_NVFP4
