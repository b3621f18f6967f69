#!/usr/bin/env bash
# Runs scripts/validate_transformers.py or scripts/validate_modelopt.py in a venv made from the
# pinned scripts/requirements-validate.txt (PyPI; the torch wheel pulls several GB of CUDA
# libraries, so this is never part of CI). The venv is made once and remade when the pins change.
#   bash scripts/validate.sh transformers [--only Llama Qwen3-MoE] [--work DIR]
#   bash scripts/validate.sh modelopt [--work DIR]
# FP4LM_VALIDATE_VENV=PATH chooses the venv (default .venv-validate in the repository root).
# Build build/fp4lm first (cmake --build build --target fp4lm_cli), or pass --fp4lm BIN.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
which="${1:-}"
case "$which" in
  transformers|modelopt) shift ;;
  *) echo "usage: bash scripts/validate.sh transformers|modelopt [script options]" >&2; exit 2 ;;
esac
venv="${FP4LM_VALIDATE_VENV:-$repo/.venv-validate}"
req="$repo/scripts/requirements-validate.txt"
if ! [ -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.requirements"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.requirements"
fi
exec "$venv/bin/python" "$repo/scripts/validate_$which.py" "$@"
