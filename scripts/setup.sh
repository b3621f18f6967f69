#!/usr/bin/env bash
# Installs every Debian package that fp4lm's build, tests, benchmarks, demo and Python package
# (`pip install .`: python3-venv, python3-dev) need, and nginx for the replicas example
# (examples/nginx, scripts/replicas.sh, tests/replicas), which runs it with its own config, and
# Open MPI for pipeline parallelism (src/dist, tests/dist; without it that part is left out) and
# iproute2 for its two-namespace test, and ccache (.ci/run: the test build and the package's
# `pip install .` share one), and chromium with its WebDriver for the chat page's browser test
# (tests/webui), and libjpeg-turbo, libpng and libwebp for decoding images (src/vision).
# (The Python test packages come from PyPI, pinned in tests/server_http*/requirements.txt, into
# venvs the tests make.)
# Idempotent: does nothing when they are all present. Needs root (or sudo) only to install.
set -euo pipefail
PKGS=(g++ cmake ninja-build pkg-config make ccache
      nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libopenblas-dev libpcre2-dev libutf8proc-dev libboost-dev
      python3 python3-venv python3-dev
      clang libclang-rt-14-dev
      nginx
      openmpi-bin libopenmpi-dev iproute2
      chromium chromium-driver
      libcurl4-openssl-dev libssl-dev
      libjpeg62-turbo-dev libpng-dev libwebp-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# Installing nginx must not start Debian's system service (it would take port 80, e.g. in a CI
# container): while apt runs, a policy-rc.d that denies every service start is in place, unless
# the system already has one. fp4lm never uses that service.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
