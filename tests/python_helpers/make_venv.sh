#!/usr/bin/env bash
# Shared by tests/server_http/setup_venv.sh and tests/python_package/setup_venv.sh: makes VENV with the
# pinned REQUIREMENTS installed; does nothing when it already holds exactly them (a stamp copy).
# Usage: make_venv.sh VENV REQUIREMENTS. Exit 77 (ctest: skipped) when no venv can be made here
# (python3 or python3-venv missing, or PyPI unreachable), with the reason on stderr.
set -uo pipefail
venv="$1"
req="$2"
stamp="$venv/.requirements"
if ! command -v python3 >/dev/null; then echo "SKIP: python3 is not installed" >&2; exit 77; fi
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then exit 0; fi
rm -rf "$venv"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
  echo "SKIP: python3 -m venv failed (install python3-venv: bash scripts/setup.sh)" >&2
  rm -rf "$venv"
  exit 77
fi
if ! timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2; then
  echo "SKIP: pip could not install $req (is PyPI reachable?)" >&2
  rm -rf "$venv"
  exit 77
fi
cp "$req" "$stamp"
