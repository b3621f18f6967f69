#!/usr/bin/env bash
# Pipeline parallelism through mpirun on this one machine (ctest: pipeline_mpi). For a dense
# Llama, a Qwen3-MoE and the Qwen3.5 hybrid (tiny synthetic NVFP4 checkpoints), `mpirun -np 2`
# and `-np 3` of `fp4lm generate --pipeline-parallel-size N` give the single process's tokens and
# logprobs bit for bit (a 300-token prompt: several forward steps), speculative decoding too
# (rewinds mirrored to every stage); and the refusals: no mpirun, a wrong process count, more
# stages than layers, a rank whose files differ from rank 0's (named with host and file).
# Skipped (77) without mpirun (bash scripts/setup.sh installs Open MPI).
set -uo pipefail
BIN=${1:?usage: run_test.sh FP4LM_BIN}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
if "$BIN" generate --model /nonexistent --prompt-ids 1 --pipeline-parallel-size 2 2>&1 | grep -q "this build of fp4lm has none"; then
  echo "SKIP: this fp4lm was built without MPI"; exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
same() {  # same tokens, text and logprobs in two --json outputs
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["prompt_ids", "output_ids", "text", "finish_reason", "logprobs"]
diff = [k for k in keys if a.get(k) != b.get(k)]
print("differs in " + ", ".join(diff) if diff else "same", a["output_ids"], b["output_ids"])
sys.exit(1 if diff else 0)
PY
}
IDS=$(python3 -c "print(','.join(str((i * 7) % 250 + 1) for i in range(300)))")
GEN=(generate --prompt-ids "$IDS" --max-tokens 6 --json --logprobs 3 --threads 1 --log-level warn)
for arch in LlamaForCausalLM Qwen3MoeForCausalLM Qwen3_5ForCausalLM; do
  "$BIN" synth --out "$T/$arch" --arch "$arch" --layers 4 >/dev/null 2>&1 || bad "synth $arch"
  "$BIN" "${GEN[@]}" --model "$T/$arch" > "$T/$arch.1.json" 2> "$T/err" || { bad "$arch single"; cat "$T/err"; }
  for n in 2 3; do
    if timeout 120 "${MPIRUN[@]}" -np $n "$BIN" "${GEN[@]}" --model "$T/$arch" --pipeline-parallel-size $n \
        > "$T/$arch.$n.json" 2> "$T/err"; then
      same "$T/$arch.1.json" "$T/$arch.$n.json" && echo "ok: $arch, $n ranks" || bad "$arch: $n ranks differ"
    else
      bad "$arch: mpirun -np $n failed"; tail -5 "$T/err"
    fi
  done
done

# Speculative decoding: its verify steps ask every position's logits and rewind the stages.
SPEC=(--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}')
REP=$(python3 -c "print(','.join(str(1 + i % 5) for i in range(40)))")
SGEN=(generate --prompt-ids "$REP" --max-tokens 12 --json --logprobs 1 --threads 1 --log-level warn)
L="$T/LlamaForCausalLM"
"$BIN" "${SGEN[@]}" --model "$L" "${SPEC[@]}" > "$T/spec.1.json" 2>/dev/null || bad "speculative single"
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" "${SGEN[@]}" --model "$L" "${SPEC[@]}" --pipeline-parallel-size 2 \
  > "$T/spec.2.json" 2> "$T/err" || { bad "speculative: mpirun failed"; tail -5 "$T/err"; }
same "$T/spec.1.json" "$T/spec.2.json" && echo "ok: speculative decoding, 2 ranks" || bad "speculative differs"

# Refusals.
"$BIN" "${GEN[@]}" --model "$L" --pipeline-parallel-size 2 > /dev/null 2> "$T/err"
rc=$?
[ $rc -eq 2 ] && grep -q "mpirun -np 2" "$T/err" && echo "ok: without mpirun: exit 2" ||
  { bad "without mpirun: exit $rc"; cat "$T/err"; }
timeout 60 "${MPIRUN[@]}" -np 3 "$BIN" "${GEN[@]}" --model "$L" --pipeline-parallel-size 2 > /dev/null 2> "$T/err"
rc=$?
[ $rc -ne 0 ] && grep -q "but 3 processes run" "$T/err" && echo "ok: wrong process count: exit $rc" ||
  { bad "wrong process count: exit $rc"; tail -5 "$T/err"; }
timeout 60 "${MPIRUN[@]}" -np 5 "$BIN" "${GEN[@]}" --model "$L" --pipeline-parallel-size 5 > /dev/null 2> "$T/err"
rc=$?
[ $rc -ne 0 ] && grep -q "exceeds the model's 4 decoder layers" "$T/err" && echo "ok: more stages than layers: exit $rc" ||
  { bad "more stages than layers: exit $rc"; tail -5 "$T/err"; }
# Rank 1 reads another checkpoint: both ranks refuse, naming rank 1's host and the file that
# differs: config.json, or (same config.json) the tensor headers of its stage in the weights file.
"$BIN" synth --out "$T/other" --arch LlamaForCausalLM --layers 4 --quantize-lm-head >/dev/null 2>&1
mkdir -p "$T/tensors" && cp "$L"/*.json "$T/tensors/" && cp "$T/other/model.safetensors" "$T/tensors/"
for what in "other:config.json" "tensors:model.safetensors"; do
  dir="$T/${what%%:*}" file="${what#*:}"
  timeout 60 "${MPIRUN[@]}" -np 1 "$BIN" "${GEN[@]}" --model "$L" --pipeline-parallel-size 2 : \
    -np 1 "$BIN" "${GEN[@]}" --model "$dir" --pipeline-parallel-size 2 > /dev/null 2> "$T/err"
  rc=$?
  grep -q "pipeline rank 1 on host $(hostname): $dir/$file differs from rank 0's" "$T/err" && [ $rc -ne 0 ] &&
    echo "ok: mismatched $file: exit $rc" || { bad "mismatched $file: exit $rc"; head -3 "$T/err"; }
done

[ $fails -eq 0 ] && echo "pipeline_mpi: all passed" || echo "pipeline_mpi: $fails failed"
exit $((fails > 0))
