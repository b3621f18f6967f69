#!/usr/bin/env bash
# Regenerates the tables of docs/ACCURACY.md: quantizes ../shared/models/{stories260k,tiny-qwen3-moe}
# with `fp4lm quantize` (W4A16_NVFP4 and NVFP4) and scores each variant with
# `fp4lm eval --reference ORIGINAL` (perplexity, mean KL(original‖variant), top-1 agreement).
# Usage: scripts/accuracy.sh [path/to/fp4lm]   (default build/fp4lm)
set -euo pipefail
FP4LM=${1:-build/fp4lm}
SHARED=$(cd "$(dirname "$0")/../../shared/models" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STORIES=$SHARED/stories260k
MOE=$SHARED/tiny-qwen3-moe

# Calibration: the first 16 held-out sequences (stories written by stories260k itself, the
# tiny-qwen3-moe teacher); evaluation never uses them.
head -n 16 "$MOE/heldout.jsonl" > "$WORK/calib.jsonl"
tail -n +17 "$MOE/heldout.jsonl" > "$WORK/heldout-eval.jsonl"

quantize() {  # model out algo [extra...]
  "$FP4LM" --log-level warn quantize --model "$1" --out "$2" --algo "$3" "${@:4}"
}
row() {  # label model reference ids [extra...]
  "$FP4LM" --log-level warn eval --model "$2" --reference "$3" --ids "$4" --json "${@:5}" |
    python3 -c "import json,sys; j=json.load(sys.stdin); r=j['reference']; print('| %s | %.4f | %.5f | %.4f |' % (sys.argv[1], j['perplexity'], r['mean_kl'], r['top1_agreement']))" "$1"
}
table() {  # original ids title
  local m=$1 ids=$2
  echo "### $3"
  echo
  echo "| variant | perplexity | mean KL(orig‖variant) | top-1 agreement |"
  echo "|---|---|---|---|"
  row "original" "$m" "$m" "$ids"
  row "W4A16_NVFP4" "$WORK/$(basename "$m")-w4a16" "$m" "$ids"
  row "NVFP4 (W4A4)" "$WORK/$(basename "$m")-nvfp4" "$m" "$ids"
  row "NVFP4 + \`--override-activation-dtype bfloat16\`" "$WORK/$(basename "$m")-nvfp4" "$m" "$ids" --override-activation-dtype bfloat16
  row "NVFP4 + \`--a16-max-tokens 64\`" "$WORK/$(basename "$m")-nvfp4" "$m" "$ids" --a16-max-tokens 64
  row "NVFP4 + \`--a16-max-tokens 16\`" "$WORK/$(basename "$m")-nvfp4" "$m" "$ids" --a16-max-tokens 16
  echo
}

# --activation-scale dynamic (per-token activation global scales) against the original, the
# static scales of the same file, and W4A16 (the same weights, 16-bit activations).
dynamic_table() {  # original ids title
  local m=$1 ids=$2 q
  q="$WORK/$(basename "$m")"
  echo "### $3"
  echo
  echo "| variant | reference | perplexity | mean KL(reference‖variant) | top-1 agreement |"
  echo "|---|---|---|---|---|"
  for v in "static|" "dynamic|--activation-scale dynamic"; do
    for r in "original|$m" "W4A16_NVFP4|$q-w4a16" "NVFP4 static|$q-nvfp4"; do
      [ "${v%%|*}" = static ] && [ "${r%%|*}" = "NVFP4 static" ] && continue
      # shellcheck disable=SC2086
      row "NVFP4 ${v%%|*} | ${r%%|*}" "$q-nvfp4" "${r#*|}" "$ids" ${v#*|}
    done
  done
  echo
}

for m in "$STORIES" "$MOE"; do
  quantize "$m" "$WORK/$(basename "$m")-w4a16" W4A16_NVFP4
  quantize "$m" "$WORK/$(basename "$m")-nvfp4" NVFP4 --calib-ids "$WORK/calib.jsonl"
done
table "$STORIES" "$STORIES/reference_greedy.jsonl" "stories260k — its 2 reference greedy sequences (128 predicted tokens)"
table "$STORIES" "$WORK/heldout-eval.jsonl" "stories260k — held-out stories 17–64 of tiny-qwen3-moe/heldout.jsonl (7102 predicted tokens)"
table "$MOE" "$WORK/heldout-eval.jsonl" "tiny-qwen3-moe — held-out sequences 17–64 of heldout.jsonl (7102 predicted tokens)"
dynamic_table "$STORIES" "$WORK/heldout-eval.jsonl" "Dynamic activation scale: stories260k, held-out 17–64 (7102 predicted tokens)"
dynamic_table "$MOE" "$WORK/heldout-eval.jsonl" "Dynamic activation scale: tiny-qwen3-moe, held-out 17–64 (7102 predicted tokens)"
