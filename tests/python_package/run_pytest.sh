#!/usr/bin/env bash
# ctest entry: runs pytest on tests/python_package inside the venv setup_venv.sh made.
# Usage: run_pytest.sh VENV FP4LM_BIN [pytest args...]; exit 77 (skipped) when the venv is absent.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$(realpath -m "$1")"
export FP4LM_BIN="$(realpath -m "$2")"
shift 2
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIP: no Python venv at $venv (tests/python_package/setup_venv.sh could not create it)" >&2
  exit 77
fi
cd "$here"  # not the repo root: `import fp4lm` must find the installed package, not python/fp4lm
exec timeout 1500 "$venv/bin/python" -m pytest -p no:cacheprovider -q "$here" "$@"
