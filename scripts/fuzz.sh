#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz) and runs the safetensors header fuzzer
# and the image decoding fuzzer (src/vision; seeds: tests/vision/data) for a bounded number of inputs. Exits non-zero on a finding; the input that triggered it is
# saved under build-fuzz/findings/ (replay: build-fuzz/fuzz/fuzz_safetensors_header FILE).
#   usage: scripts/fuzz.sh [RUNS]          RUNS defaults to 20000
#   env:   FP4LM_FUZZ_BUILD (build dir), FP4LM_FUZZ_SEED (libFuzzer -seed; default random), JOBS
set -euo pipefail

runs="${1:-20000}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FP4LM_FUZZ_BUILD:-$root/build-fuzz}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 1
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DFP4LM_BUILD_FUZZ=ON -DFP4LM_BUILD_TESTS=OFF \
  -DFP4LM_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target fuzz_safetensors_header fuzz_image_decode

# New interesting inputs go to a corpus inside the build dir; the seeds in the repo stay as they are.
corpus="$build/fuzz-corpus/safetensors_header"
findings="$build/findings"
mkdir -p "$corpus" "$findings"
seed_args=()
if [[ -n "${FP4LM_FUZZ_SEED:-}" ]]; then seed_args=(-seed="$FP4LM_FUZZ_SEED"); fi

echo "fuzz.sh: fuzz_safetensors_header, $runs runs"
"$build/fuzz/fuzz_safetensors_header" "${seed_args[@]}" -runs="$runs" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -dict="$root/fuzz/safetensors.dict" -artifact_prefix="$findings/" \
  -print_final_stats=1 "$corpus" "$root/fuzz/seeds"

# Image files: JPEG, PNG, WebP decoding and the Qwen2-VL preprocessing of what decodes.
image_corpus="$build/fuzz-corpus/image_decode"
mkdir -p "$image_corpus"
echo "fuzz.sh: fuzz_image_decode, $runs runs"
"$build/fuzz/fuzz_image_decode" "${seed_args[@]}" -runs="$runs" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1 "$image_corpus" "$root/tests/vision/data"
echo "fuzz.sh: no findings"
