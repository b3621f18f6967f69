#!/usr/bin/env bash
# ctest entry: pytest on tests/hub in the venv that setup_venv.sh made (tests/python_helpers/run_pytest.sh).
# Usage: run_pytest.sh VENV FP4LM_BIN [pytest args...]; exit 77 (skipped) when the venv is absent.
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../python_helpers/run_pytest.sh" "$here" 600 "$@"
