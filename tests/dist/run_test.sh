#!/usr/bin/env bash
# Pipeline parallelism through mpirun on this one machine (ctest: pipeline_mpi). For a dense
# Llama, a Qwen3-MoE and the Qwen3.5 hybrid (tiny synthetic NVFP4 checkpoints), `mpirun -np 2`
# and `-np 3` of `fp4lm generate --pipeline-parallel-size N` give the single process's tokens and
# logprobs bit for bit (a 300-token prompt: several forward steps), 6 concurrent streams under
# `fp4lm serve` (pipelined batches) at 2 and 3 ranks too, and at 2 ranks DeepSeek-V3 (MLA),
# gpt-oss (MXFP4), Nemotron-H, Gemma 4, MiniMax-M2 and FP8 / W4A16 Llamas too; `fp4lm eval` its NLL to the
# last digit and its --dump-logits file byte for byte (-np 2 and 3), speculative decoding too
# (rewinds mirrored to every stage; with recurrent stages, the hybrid's and Nemotron-H's, token for
# token one process without speculation, drafts accepted), Gemma 4's shared-KV layers cut from the
# layers whose K/V they read and its per-layer inputs computed by the first stage (-np 2 and 3,
# --dump-logits byte for byte); and the refusals: no mpirun, a wrong process count, more
# stages than layers, a rank whose files differ from rank 0's (named with host and file); and
# faults: a rank killed or hung while `fp4lm serve` streams ends the job with the reason, in time.
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

# The other architectures and formats at 2 ranks: multi-head latent attention (DeepSeek-V3),
# gpt-oss (MXFP4 experts, sinks, sliding layers), Nemotron-H (Mamba-2), Gemma 4 (sliding rings,
# per-layer head dims), MiniMax-M2; FP8 and W4A16 NVFP4 Llamas.
for spec in "DeepseekV3ForCausalLM" "GptOssForCausalLM --algo none --mxfp4-experts" "NemotronHForCausalLM" \
    "Gemma4ForCausalLM" "MiniMaxM2ForCausalLM" "LlamaForCausalLM --algo FP8" "LlamaForCausalLM --algo W4A16_NVFP4"; do
  read -r arch synth_args <<< "$spec"
  name=$(echo "$spec" | tr -c 'A-Za-z0-9_\n' _)
  # shellcheck disable=SC2086
  "$BIN" synth --out "$T/$name" --arch $arch $synth_args --layers 4 >/dev/null 2>&1 || bad "synth $spec"
  "$BIN" "${GEN[@]}" --model "$T/$name" > "$T/$name.1.json" 2> "$T/err" || { bad "$spec single"; cat "$T/err"; }
  if timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" "${GEN[@]}" --model "$T/$name" --pipeline-parallel-size 2 \
      > "$T/$name.2.json" 2> "$T/err"; then
    same "$T/$name.1.json" "$T/$name.2.json" && echo "ok: $spec, 2 ranks" || bad "$spec: 2 ranks differ"
  else
    bad "$spec: mpirun -np 2 failed"; tail -5 "$T/err"
  fi
done

# eval: teacher-forced NLL through the stages (every position's logits, chunks of 64) equals one
# process's to the last digit.
python3 -c "
for n in (150, 7):
    print('[' + ','.join(str((i * 13) % 250 + 1) for i in range(n)) + ']')" > "$T/ids.jsonl"
nll() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["tokens"], repr(o["mean_nll"]))' "$1"; }
EVAL=(eval --ids "$T/ids.jsonl" --json --threads 1 --log-level warn)
# --dump-logits too: every position's logits through the stages, the file byte for byte one process's.
for arch in LlamaForCausalLM Qwen3MoeForCausalLM Qwen3_5ForCausalLM; do
  "$BIN" "${EVAL[@]}" --model "$T/$arch" --dump-logits "$T/$arch.d1.jsonl" > "$T/$arch.eval1.json" 2> "$T/err" ||
    { bad "$arch eval single"; cat "$T/err"; }
  for n in 2 3; do
    if timeout 120 "${MPIRUN[@]}" -np $n "$BIN" "${EVAL[@]}" --model "$T/$arch" --pipeline-parallel-size $n \
        --dump-logits "$T/$arch.d$n.jsonl" > "$T/$arch.eval$n.json" 2> "$T/err"; then
      a=$(nll "$T/$arch.eval1.json") b=$(nll "$T/$arch.eval$n.json")
      [ "$a" = "$b" ] && echo "ok: eval $arch, $n ranks ($a)" || bad "eval $arch: $n ranks give $b, one process $a"
      cmp -s "$T/$arch.d1.jsonl" "$T/$arch.d$n.jsonl" && echo "ok: eval --dump-logits $arch, $n ranks" ||
        bad "eval --dump-logits $arch: $n ranks differ from one process"
    else
      bad "eval $arch: mpirun -np $n failed"; tail -5 "$T/err"
    fi
  done
done
# Gemma 4 with shared K/V (num_kv_shared_layers 2 of 6: layer 4 reads layer 2's sliding ring,
# layer 5 layer 3's full K/V): both cuts the planner picks (-np 2: [0, 4) [4, 6); -np 3: [0, 2)
# [2, 5) [5, 6)) separate a reader from its source; the source's stage sends the rows on, and the
# logits stay one process's byte for byte.
G="$T/gemma4_shared_kv"
GEVAL=(eval --ids "$T/ids.jsonl" --json --threads 1)
"$BIN" synth --out "$G" --arch Gemma4ForCausalLM --layers 6 --kv-shared-layers 2 >/dev/null 2>&1 || bad "synth gemma4 shared kv"
"$BIN" "${GEVAL[@]}" --log-level warn --model "$G" --dump-logits "$T/g.d1.jsonl" > /dev/null 2> "$T/err" || { bad "gemma4 shared kv single"; cat "$T/err"; }
for n in 2 3; do
  if timeout 120 "${MPIRUN[@]}" -np $n "$BIN" "${GEVAL[@]}" --log-level info --model "$G" --pipeline-parallel-size $n \
      --dump-logits "$T/g.d$n.jsonl" > /dev/null 2> "$T/err"; then
    crossing=$(grep -c "receives the K/V of decoder layer" "$T/err")
    if ! cmp -s "$T/g.d1.jsonl" "$T/g.d$n.jsonl"; then
      bad "eval --dump-logits gemma4 shared kv: $n ranks differ from one process"
    elif [ "$crossing" -lt 1 ]; then
      bad "gemma4 shared kv, $n ranks: no K/V crossed a cut (the plan changed?)"; grep "pipeline stage" "$T/err"
    else
      echo "ok: eval --dump-logits gemma4 shared kv across stages, $n ranks"
    fi
  else
    bad "gemma4 shared kv: mpirun -np $n failed"; tail -5 "$T/err"
  fi
done
# Gemma 4 with per-layer input embeddings (hidden_size_per_layer_input, the E2B / E4B form):
# layer 0 computes every layer's input; the first stage sends them on with the residual stream.
P="$T/gemma4_ple"
"$BIN" synth --out "$P" --arch Gemma4ForCausalLM --layers 6 --kv-shared-layers 2 --ple-dim 16 >/dev/null 2>&1 || bad "synth gemma4 ple"
"$BIN" "${GEVAL[@]}" --log-level warn --model "$P" --dump-logits "$T/p.d1.jsonl" > /dev/null 2> "$T/err" || { bad "gemma4 ple single"; cat "$T/err"; }
for n in 2 3; do
  if timeout 120 "${MPIRUN[@]}" -np $n "$BIN" "${GEVAL[@]}" --log-level info --model "$P" --pipeline-parallel-size $n \
      --dump-logits "$T/p.d$n.jsonl" > /dev/null 2> "$T/err"; then
    if ! cmp -s "$T/p.d1.jsonl" "$T/p.d$n.jsonl"; then
      bad "eval --dump-logits gemma4 per-layer inputs: $n ranks differ from one process"
    elif ! grep -q "receives Gemma 4's per-layer inputs" "$T/err"; then
      bad "gemma4 per-layer inputs, $n ranks: no stage received them"
    else
      echo "ok: eval --dump-logits gemma4 per-layer inputs across stages, $n ranks"
    fi
  else
    bad "gemma4 per-layer inputs: mpirun -np $n failed"; tail -5 "$T/err"
  fi
done
"$BIN" eval --model "$T/LlamaForCausalLM" --ids "$T/ids.jsonl" --reference "$T/LlamaForCausalLM" --pipeline-parallel-size 2 >/dev/null 2> "$T/err"
rc=$?
[ $rc -eq 2 ] && grep -q "runs in one process" "$T/err" && echo "ok: eval --reference with a pipeline: exit 2" ||
  { bad "eval --reference with a pipeline: exit $rc"; cat "$T/err"; }

# Speculative decoding: its verify steps ask every position's logits and rewind the stages.
SPEC=(--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}')
REP=$(python3 -c "print(','.join(str(1 + i % 5) for i in range(40)))")
SGEN=(generate --prompt-ids "$REP" --max-tokens 12 --json --logprobs 1 --threads 1 --log-level warn)
L="$T/LlamaForCausalLM"
"$BIN" "${SGEN[@]}" --model "$L" "${SPEC[@]}" > "$T/spec.1.json" 2>/dev/null || bad "speculative single"
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" "${SGEN[@]}" --model "$L" "${SPEC[@]}" --pipeline-parallel-size 2 \
  > "$T/spec.2.json" 2> "$T/err" || { bad "speculative: mpirun failed"; tail -5 "$T/err"; }
same "$T/spec.1.json" "$T/spec.2.json" && echo "ok: speculative decoding, 2 ranks" || bad "speculative differs"
# With recurrent stages (the Qwen3.5 hybrid's gated delta-nets, Nemotron-H's Mamba-2): each stage
# cuts its recurrent slots back past rejected drafts by replaying the verify chunk's accepted rows,
# so the pipeline's tokens and logprobs with n-gram speculation are one process's without it; the
# log shows drafts accepted and rejected (both paths of the rewind taken).
HGEN=(generate --prompt-ids "$REP" --max-tokens 40 --json --logprobs 1 --threads 1)
for spec in "Qwen3_5ForCausalLM 2" "Qwen3_5ForCausalLM 3" "NemotronHForCausalLM 2"; do
  read -r arch n <<< "$spec"
  [ -d "$T/$arch" ] || "$BIN" synth --out "$T/$arch" --arch "$arch" --layers 4 >/dev/null 2>&1 || bad "synth $arch"
  "$BIN" "${HGEN[@]}" --log-level warn --model "$T/$arch" > "$T/hspec.1.json" 2>/dev/null || bad "$arch single"
  if timeout 120 "${MPIRUN[@]}" -np "$n" "$BIN" "${HGEN[@]}" --log-level info --model "$T/$arch" "${SPEC[@]}" \
      --pipeline-parallel-size "$n" > "$T/hspec.$n.json" 2> "$T/err"; then
    counts=$(sed -n 's/.*speculative decoding: \([0-9]*\) of \([0-9]*\) draft tokens accepted.*/\1 \2/p' "$T/err")
    read -r acc drafts <<< "${counts:-0 0}"
    if ! same "$T/hspec.1.json" "$T/hspec.$n.json"; then
      bad "speculative $arch, $n ranks: differs from one process without speculation"
    elif [ "$acc" -gt 0 ] && [ "$drafts" -gt "$acc" ]; then
      echo "ok: speculative decoding with recurrent stages, $arch, $n ranks ($acc of $drafts drafts accepted)"
    else
      bad "speculative $arch, $n ranks: drafts accepted '$acc' of '$drafts' (speculation not on?)"; grep -i specul "$T/err"
    fi
  else
    bad "speculative $arch: mpirun -np $n failed"; tail -5 "$T/err"
  fi
done

# Several streams at once (pipelined batches: up to N micro-batches in flight, the running
# sequences in up to N groups): `fp4lm serve` under mpirun -np 2 and 3 gives each of 6 concurrent
# requests (prompts of 5..40 tokens, greedy and seeded sampling) the token ids and logprobs one
# process gives it.
streams() {  # PORT -> one JSON line per request, in request order
  python3 - "$1" <<'PY'
import json, sys, threading, urllib.request
port = sys.argv[1]
def body(i):
    b = {"prompt": [(i * 17 + k * 5) % 250 + 1 for k in range(5 + 7 * i)], "max_tokens": 8, "ignore_eos": True,
         "logprobs": 2, "return_token_ids": True, "temperature": 0}
    if i % 2:
        b.update(temperature=0.9, seed=100 + i)
    return b
out = [None] * 6
def run(i):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body(i)).encode(),
                                 {"Content-Type": "application/json"})
    c = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]
    out[i] = {"ids": c["token_ids"], "logprobs": c["logprobs"]["token_logprobs"], "finish": c["finish_reason"]}
threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
for t in threads: t.start()
for t in threads: t.join()
for o in out: print(json.dumps(o))
PY
}
for arch in LlamaForCausalLM Qwen3MoeForCausalLM; do
  for n in 1 2 3; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if [ $n = 1 ]; then
      "$BIN" serve --model "$T/$arch" --port "$port" --threads 1 --max-num-seqs 8 --log-level info > /dev/null 2> "$T/serve.err" &
    else
      "${MPIRUN[@]}" -np $n "$BIN" serve --model "$T/$arch" --port "$port" --threads 1 --max-num-seqs 8 \
        --log-level info --pipeline-parallel-size $n > /dev/null 2> "$T/serve.err" &
    fi
    spid=$!
    for _ in $(seq 1 300); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.2; done
    streams "$port" > "$T/streams.$n.jsonl" 2> "$T/err" ||
      { bad "$arch streams, $n ranks: requests failed"; tail -3 "$T/err"; }
    if [ $n = 1 ]; then kill -TERM "$spid"; else kill -TERM "$(pgrep -P "$spid" | head -1)"; fi
    wait "$spid" 2>/dev/null
    if [ $n -gt 1 ]; then
      grep -q "pipelined batches: up to $n forwards in flight" "$T/serve.err" || bad "$arch: $n ranks did not pipeline"
      if [ "$(wc -l < "$T/streams.$n.jsonl")" -eq 6 ] && cmp -s "$T/streams.1.jsonl" "$T/streams.$n.jsonl"; then
        echo "ok: $arch, 6 concurrent streams, $n ranks: tokens and logprobs as one process"
      else
        bad "$arch: 6 concurrent streams at $n ranks differ from one process"; diff "$T/streams.1.jsonl" "$T/streams.$n.jsonl" | head -4
      fi
    fi
  done
done

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

# Faults under `fp4lm serve`: a rank SIGKILLed or stopped (hung) while a request streams. Rank 0
# fails the request with the reason and the job ends non-zero within the stated bound: about
# 2 s after a kill (mpirun's SIGTERM, then SIGKILL), the heartbeat timeout (here 2 s) after a
# hang; 15 s is the test's limit. A model slow enough that 500 tokens take seconds.
"$BIN" synth --out "$T/slow" --arch LlamaForCausalLM --layers 4 --hidden 1536 >/dev/null 2>&1
for fault in KILL STOP; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${MPIRUN[@]}" -np 2 "$BIN" serve --model "$T/slow" --port "$port" --threads 1 --pipeline-parallel-size 2 \
    --pipeline-heartbeat-timeout 2 > /dev/null 2> "$T/serve.err" &
  mpid=$!
  for _ in $(seq 1 300); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.2; done
  rank1=$(sed -n 's/.*pipeline stage 1: .*(pid \([0-9]*\)).*/\1/p' "$T/serve.err")
  curl -sN "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": [1, 2, 3], "max_tokens": 500, "ignore_eos": true, "stream": true}' > "$T/stream" 2>/dev/null &
  cpid=$!
  # (No tokenizer: the stream's chunks carry no text until the end; /metrics says it runs.)
  streamed=0
  for _ in $(seq 1 100); do
    curl -s "localhost:$port/metrics" | grep -q '^vllm:num_requests_running{[^}]*} 1' && { streamed=3; break; }
    sleep 0.05
  done
  sleep 0.3
  t0=$(date +%s.%N)
  kill -"$fault" "$rank1"
  for _ in $(seq 1 150); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$mpid" 2>/dev/null; then
    bad "$fault of rank 1: the job still runs after 15 s"; kill -KILL "$mpid" "$rank1" 2>/dev/null
  fi
  wait "$mpid"; rc=$?
  took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  wait "$cpid"
  done_seen=$(grep -c '"finish_reason":"length"' "$T/stream")
  reason=$(grep -c 'has sent no heartbeat' "$T/stream")
  logged=$(grep -c 'failing the requests in flight and ending the job' "$T/serve.err")
  if [ -z "$rank1" ] || [ "$streamed" -lt 3 ]; then
    bad "$fault: no request in flight (rank 1 pid '$rank1')"
  elif [ $rc -ne 0 ] && [ "$done_seen" -eq 0 ] && [ "$logged" -ge 1 ] && { [ "$fault" = KILL ] || [ "$reason" -ge 1 ]; }; then
    echo "ok: $fault of rank 1 mid-stream: job ended in ${took} s, exit $rc, stream failed (reason in it: $reason)"
  else
    bad "$fault of rank 1: exit $rc after ${took} s, finished $done_seen, reason in stream $reason, logged $logged"
    grep -E '^[EW] ' "$T/serve.err" | tail -3; tail -2 "$T/stream"
  fi
done

[ $fails -eq 0 ] && echo "pipeline_mpi: all passed" || echo "pipeline_mpi: $fails failed"
exit $((fails > 0))
