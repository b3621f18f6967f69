#!/usr/bin/env bash
# ctest fixture: creates VENV (default build/pyvenv) with tests/server_http/requirements.txt installed;
# does nothing when it already matches. Exit 77 (ctest: skipped) when no venv can be made here,
# with the reason on stderr (tests/python_helpers/make_venv.sh).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../python_helpers/make_venv.sh" "${1:-build/pyvenv}" "$here/requirements.txt"
