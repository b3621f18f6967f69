#!/usr/bin/env bash
# ctest entry: the chat page of `fp4lm serve` in headless chromium (tests/webui/test_webui.py).
# Usage: run_test.sh VENV FP4LM_BIN ARTIFACT_DIR. Exit 77 (ctest: skipped), with the reason, when
# chromium or chromium-driver is not installed (bash scripts/setup.sh installs both) or no venv
# with the pinned Selenium can be made (tests/python_helpers/make_venv.sh).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$1"
bin="$2"
artifacts="$3"
for exe in chromium chromedriver; do
  if ! command -v "$exe" >/dev/null; then
    echo "SKIP: $exe is not installed (Debian packages chromium and chromium-driver: bash scripts/setup.sh)" >&2
    exit 77
  fi
done
"$here/../python_helpers/make_venv.sh" "$venv" "$here/requirements.txt" || exit $?
cd "$here/../.."
exec timeout 300 "$venv/bin/python" "$here/test_webui.py" "$bin" "$artifacts"
