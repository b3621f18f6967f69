#!/usr/bin/env bash
# ctest entry: runs pytest on tests/hub inside the venv that setup_venv.sh made.
# Usage: run_pytest.sh VENV FP4LM_BIN [pytest args...]; exit 77 (skipped) when the venv is absent.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$1"
export FP4LM_BIN="$2"
shift 2
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIP: no Python venv at $venv (tests/hub/setup_venv.sh could not create it)" >&2
  exit 77
fi
cd "$here/../.."
exec timeout 600 "$venv/bin/python" -m pytest -p no:cacheprovider -q "$here" "$@"
