#!/usr/bin/env bash
# Runs pytest on one test folder inside the venv its setup_venv.sh made (the ctest entries of
# tests/server_http and tests/hub). Usage: run_pytest.sh TEST_DIR TIMEOUT_S VENV FP4LM_BIN
# [pytest args...]; exit 77 (ctest: skipped) when the venv is absent.
set -uo pipefail
dir="$(cd "$1" && pwd)"
limit="$2"
venv="$3"
export FP4LM_BIN="$4"
shift 4
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIP: no Python venv at $venv (${dir#"$(cd "$dir/../.." && pwd)/"}/setup_venv.sh could not create it)" >&2
  exit 77
fi
cd "$dir/../.."
exec timeout "$limit" "$venv/bin/python" -m pytest -p no:cacheprovider -q "$dir" "$@"
