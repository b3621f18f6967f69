#!/usr/bin/env bash
# The README demo: write a small NVFP4 (W4A4) Qwen3-MoE checkpoint with the library's own writer
# and reference quantizer (random weights), inspect it, then generate from it twice: as stored
# (W4A4 backends) and with --override-activation-dtype bfloat16 (the W4A16 path), without
# touching the files.
set -euo pipefail
FP4LM=${1:-build/fp4lm}
DIR=$(mktemp -d /tmp/fp4lm-demo.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
CKPT="$DIR/tiny-qwen3-moe-nvfp4"

echo "== fp4lm synth: a random-weight NVFP4 Qwen3-MoE checkpoint in ModelOpt layout"
"$FP4LM" synth --out "$CKPT" --arch Qwen3MoeForCausalLM --algo NVFP4 --layers 2 --hidden 128 --experts 8
echo
echo "== fp4lm inspect"
"$FP4LM" inspect --model "$CKPT"
sum_before=$(cat "$CKPT"/* | sha256sum)
echo
echo "== fp4lm generate (as stored: NVFP4 W4A4)"
"$FP4LM" generate --model "$CKPT" --prompt-ids 1,17,42 --max-tokens 12
echo
echo "== fp4lm generate --override-activation-dtype bfloat16 (W4A16 path, same files)"
"$FP4LM" generate --model "$CKPT" --prompt-ids 1,17,42 --max-tokens 12 --override-activation-dtype bfloat16
sum_after=$(cat "$CKPT"/* | sha256sum)
[ "$sum_before" = "$sum_after" ] && echo && echo "checkpoint files unchanged by the override: yes"
