#!/usr/bin/env bash
# Regenerates docs/ACCURACY.md's real-text table: SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh)
# on Debian's licence texts (/usr/share/common-licenses, base-files: always there). Calibration
# on GPL-3; perplexity on Apache-2.0 and MPL-2.0, cut into 512-token sequences (no BOS: the model's
# tokenizer adds none), the same ids for every row. fp4lm's rows come from
# `fp4lm eval --reference BF16` (mean KL(bf16‖variant), top-1 agreement); llama.cpp's from
# scripts/accuracy_llamacpp.py (llama-cpp-python, pinned, in a venv under the cache), compared with
# fp4lm's bf16 logits of the same ids in the same way.
# Usage: scripts/accuracy_smollm2.sh [path/to/fp4lm]   (default build/fp4lm)
# Takes about an hour on 2 cores (gptq's and awq's calibration: 3 to 15 minutes per checkpoint by load) (the first run also builds llama-cpp-python: ~30 minutes).
set -euo pipefail
FP4LM=${1:-build/fp4lm}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${FP4LM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lm}
GGUF=$(bash "$HERE/fetch_smollm2.sh")
# ACCURACY_WORK=DIR keeps the work (checkpoints, ids, logits) there and reuses what is present.
if [ -n "${ACCURACY_WORK:-}" ]; then W=$ACCURACY_WORK; mkdir -p "$W"; else W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; fi
LIC=/usr/share/common-licenses
CALIB=("$LIC/GPL-3")
EVAL=("$LIC/Apache-2.0" "$LIC/MPL-2.0")
SEQ=512

[ -d "$W/bf16" ] || "$FP4LM" --log-level warn convert --gguf "$GGUF" --out "$W/bf16" >/dev/null
for f in "${EVAL[@]}"; do "$FP4LM" tokenize --model "$W/bf16" --text "$(cat "$f")" --json; done |
  /usr/bin/python3 -c '
import json, sys
seq = int(sys.argv[1])
for line in sys.stdin:
    ids = json.loads(line)["ids"]
    for i in range(0, len(ids) - 1, seq):
        chunk = ids[i:i + seq]
        if len(chunk) >= 2:
            print(json.dumps({"ids": chunk}))
' "$SEQ" > "$W/ids.jsonl"
predicted=$(/usr/bin/python3 -c 'import json,sys; print(sum(len(json.loads(l)["ids"]) - 1 for l in open(sys.argv[1])))' "$W/ids.jsonl")

# One checkpoint per weight method (docs/QUANTIZE.md "Weight rounding"); gptq is the default with
# calibration data, search without.
q() {  # out algo [flags...]
  [ -d "$W/$1" ] || "$FP4LM" --log-level warn quantize --model "$W/bf16" --out "$W/$1" --algo "$2" "${@:3}"
}
CAL=(--calib-text "${CALIB[@]}" --calib-samples 64 --calib-seq-len "$SEQ")
q w4a16 W4A16_NVFP4 --weight-method rtn
q w4a16_search W4A16_NVFP4
q w4a16_gptq W4A16_NVFP4 --weight-method gptq --no-awq "${CAL[@]}"
q nvfp4 NVFP4 --weight-method rtn "${CAL[@]}"
q nvfp4_gptq NVFP4 --weight-method gptq --no-awq "${CAL[@]}"
# AWQ (docs/QUANTIZE.md "AWQ"): alone (rtn rounding: ModelOpt's NVFP4_AWQ_LITE recipe) and with gptq.
q w4a16_awq W4A16_NVFP4 --awq --weight-method rtn "${CAL[@]}"
q w4a16_awq_gptq W4A16_NVFP4 --awq --weight-method gptq "${CAL[@]}"
q nvfp4_awq NVFP4 --awq --weight-method rtn "${CAL[@]}"
q nvfp4_awq_gptq NVFP4 --awq --weight-method gptq "${CAL[@]}"

mib() { du -sm --apparent-size "$1" | cut -f1; }
row() {  # label model [extra eval flags...]
  "$FP4LM" --log-level warn eval --model "$2" --reference "$W/bf16" --ids "$W/ids.jsonl" --json "${@:3}" |
    /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); r=j['reference']; print('| %s | %.4f | %.5f | %.4f |' % (sys.argv[1], j['perplexity'], r['mean_kl'], r['top1_agreement']))" "$1"
}

echo "### SmolLM2-135M-Instruct — Debian's Apache-2.0 and MPL-2.0 texts ($predicted predicted tokens, $SEQ-token sequences; calibration: $(basename -a "${CALIB[@]}" | paste -sd' '))"
echo
echo "| variant | perplexity | mean KL(bf16‖variant) | top-1 agreement with bf16 |"
echo "|---|---|---|---|"
row "fp4lm bf16 (converted GGUF, $(mib "$W/bf16") MiB)" "$W/bf16"
row "fp4lm bf16 + \`--kv-cache-dtype fp8\`" "$W/bf16" --kv-cache-dtype fp8
row "fp4lm W4A16_NVFP4, \`rtn\` (ModelOpt's rule; $(mib "$W/w4a16") MiB)" "$W/w4a16"
row "fp4lm W4A16_NVFP4, \`search\` (no calibration)" "$W/w4a16_search"
row "fp4lm W4A16_NVFP4, \`gptq\`" "$W/w4a16_gptq"
row "fp4lm W4A16_NVFP4, \`--awq\` + \`rtn\`" "$W/w4a16_awq"
row "fp4lm W4A16_NVFP4, \`--awq\` + \`gptq\`" "$W/w4a16_awq_gptq"
row "fp4lm NVFP4 W4A4, \`rtn\` ($(mib "$W/nvfp4") MiB)" "$W/nvfp4"
row "fp4lm NVFP4 W4A4, \`gptq\`" "$W/nvfp4_gptq"
row "fp4lm NVFP4 W4A4, \`--awq\` + \`rtn\` (ModelOpt's NVFP4_AWQ_LITE recipe)" "$W/nvfp4_awq"
row "fp4lm NVFP4 W4A4, \`--awq\` + \`gptq\`" "$W/nvfp4_awq_gptq"
row "fp4lm NVFP4 \`gptq\` + \`--override-activation-dtype bfloat16\`" "$W/nvfp4_gptq" --override-activation-dtype bfloat16

# llama.cpp: its venv (pinned), its quantizer, the same ids, compared with fp4lm's bf16 logits.
VENV=$CACHE/llamacpp-venv
if ! "$VENV/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
  echo "accuracy_smollm2: building llama-cpp-python into $VENV (once; ~30 minutes on 2 cores)" >&2
  /usr/bin/python3 -m venv "$VENV"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF" \
    "$VENV/bin/pip" install --quiet -r "$HERE/accuracy_llamacpp.requirements.txt" >&2
fi
[ -f "$W/bf16.jsonl" ] ||
  "$FP4LM" --log-level warn eval --model "$W/bf16" --ids "$W/ids.jsonl" --dump-logits "$W/bf16.jsonl" >/dev/null
"$VENV/bin/python" "$HERE/accuracy_llamacpp.py" "$GGUF" "$W" "$W/ids.jsonl" "$W/bf16.jsonl"
