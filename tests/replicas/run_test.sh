#!/usr/bin/env bash
# ctest entry: tests/replicas (two `fp4lm serve` replicas behind nginx, scripts/replicas.sh) with
# pytest from the venv of tests/server_http (setup_venv.sh). Usage: run_test.sh VENV FP4LM_BIN.
# Exit 77 (skipped) when nginx is not installed or the venv is absent.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$1"
export FP4LM_BIN="$2"
shift 2
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "SKIP: nginx is not installed (Debian's nginx: bash scripts/setup.sh installs it)" >&2
  exit 77
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIP: no Python venv at $venv (tests/server_http/setup_venv.sh could not create it)" >&2
  exit 77
fi
cd "$here/../.."
exec timeout 240 "$venv/bin/python" -m pytest -p no:cacheprovider -q "$here" "$@"
