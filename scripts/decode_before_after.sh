#!/usr/bin/env bash
# Interleaved decode_bench series of two builds (docs/BENCHMARKS.md, "Decoder-layer and state seams"):
# the same synthetic checkpoint, N pairs in ABBA order (drift on a shared host cancels), each run
# printing decode tok/s and its ratio to the roofline measured in the same process.
#
#   bash scripts/decode_before_after.sh OLD/bench/decode_bench build/bench/decode_bench [N] [TOKENS] [ARCH]
set -euo pipefail
before=${1:?usage: decode_before_after.sh BEFORE_DECODE_BENCH AFTER_DECODE_BENCH [N] [TOKENS] [ARCH]}
after=${2:?usage: decode_before_after.sh BEFORE_DECODE_BENCH AFTER_DECODE_BENCH [N] [TOKENS] [ARCH]}
n=${3:-10}
tokens=${4:-32}
arch=${5:-dense}
dir=$(mktemp -d /tmp/fp4lm-before-after.XXXXXX)
trap 'rm -rf "$dir"' EXIT
extra=()
[ "${arch#hybrid}" != "$arch" ] && extra=(--gdn-prefill chunked)
"$after" --arch "$arch" --layers 4 --threads 2 --tokens 4 --dir "$dir/ckpt" "${extra[@]}" >/dev/null 2>&1
echo "uptime before: $(uptime)"
echo "pair binary tok/s ratio_to_roofline"
for i in $(seq 1 "$n"); do
  order="before after"
  [ $((i % 2)) = 0 ] && order="after before"
  for which in $order; do
    bin=$before
    [ "$which" = after ] && bin=$after
    out=$("$bin" --arch "$arch" --layers 4 --threads 2 --tokens "$tokens" --dir "$dir/ckpt" "${extra[@]}" 2>&1)
    echo "$i $which $(echo "$out" | sed -n 's/^decode: \([0-9.]*\) tok\/s.*/\1/p') \
$(echo "$out" | sed -n 's/.*ratio to roofline \([0-9.]*\).*/\1/p')"
  done
done
echo "uptime after: $(uptime)"
