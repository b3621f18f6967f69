#!/usr/bin/env bash
# ctest fixture: creates VENV (default build/pyvenv-hub) with tests/hub/requirements.txt installed;
# does nothing when it already matches. Exit 77 (ctest: skipped) when no venv can be made here.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../python_helpers/make_venv.sh" "${1:-build/pyvenv-hub}" "$here/requirements.txt"
