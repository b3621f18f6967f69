#!/usr/bin/env bash
# ctest fixture: creates VENV with tests/python_package/requirements.txt, then `pip install .` of the
# repository (the README's install: scikit-build-core runs the project's CMake). Reinstalls the
# package every run so the tests see the current sources; the CMake build dir
# (build/py-<wheel tag>) is kept, and ccache is used when installed, so that is quick.
# Exit 77 (ctest: skipped) only when no venv can be made here (python3-venv missing, or PyPI
# unreachable for the pinned packages), with the reason on stderr; a failing build fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/build/pyvenv-api}"
cxx="${2:-}"  # the test build's C++ compiler (ctest passes it)
"$here/../python_helpers/make_venv.sh" "$venv" "$here/requirements.txt" || exit $?
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
# Warnings are errors here as in the test build, and the compiler is the test build's; so the
# package's library files are compiled with exactly the test build's command lines, and ccache
# (when the test build used it: .ci/run) has them all.
export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DFP4LM_WERROR=ON${cxx:+ -DCMAKE_CXX_COMPILER=$cxx}"
cd "$repo"
exec timeout 3000 "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps .
