#!/usr/bin/env bash
# Two hosts for real (ctest: pipeline_netns): two network namespaces joined by a veth pair, each
# with its own address; mpirun runs in the first and starts the second rank's Open MPI daemon in
# the other through a launch agent (tests/dist/netns_agent.sh, standing in for ssh), so the ranks
# talk over Open MPI's TCP transport across the veth link exactly as two machines on a LAN would
# (the hostfile names the two addresses). `fp4lm generate --pipeline-parallel-size 2` there gives
# the single process's tokens and logprobs bit for bit. Skipped (77) without root, iproute2's
# `ip netns`, or mpirun.
set -uo pipefail
BIN=${1:?usage: netns_test.sh FP4LM_BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
if "$BIN" generate --model /nonexistent --prompt-ids 1 --pipeline-parallel-size 2 2>&1 | grep -q "this build of fp4lm has none"; then
  echo "SKIP: this fp4lm was built without MPI"; exit 77
fi
[ "$(id -u)" = 0 ] && command -v ip >/dev/null || { echo "SKIP: needs root and iproute2"; exit 77; }
id=$$
a=fp4lm_a$id b=fp4lm_b$id va=fp4va$id vb=fp4vb$id
net=10.213.$((id % 250)).
T=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
ip netns add "$a" 2>/dev/null && ip netns add "$b" || { echo "SKIP: cannot create network namespaces here"; exit 77; }
set -e
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"
ip link set "$vb" netns "$b"
ip -n "$a" addr add "${net}1/24" dev "$va"
ip -n "$b" addr add "${net}2/24" dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up
ip -n "$b" link set "$vb" up
set +e
printf '%s slots=1\n%s slots=1\n' "${net}1" "${net}2" > "$T/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FP4LM_NETNS_MAP="${net}1=$a ${net}2=$b"
export FP4LM_NETNS_LOG="$T/launched"
"$BIN" synth --out "$T/m" --arch Qwen3MoeForCausalLM --layers 4 >/dev/null 2>&1
IDS=$(python3 -c "print(','.join(str((i * 7) % 250 + 1) for i in range(300)))")
GEN=(generate --model "$T/m" --prompt-ids "$IDS" --max-tokens 6 --json --logprobs 3 --threads 1 --log-level info)
"$BIN" "${GEN[@]}" > "$T/one.json" 2>/dev/null || { echo "FAIL: single process"; exit 1; }
timeout 120 ip netns exec "$a" mpirun --hostfile "$T/hosts" -np 2 --mca plm_rsh_agent "$HERE/netns_agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include "${net}0/24" --mca oob_tcp_if_include "${net}0/24" \
  "$BIN" "${GEN[@]}" --pipeline-parallel-size 2 > "$T/two.json" 2> "$T/err"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: mpirun over the veth link: exit $rc"; tail -20 "$T/err"; exit 1; }
# Rank 1's daemon was started in the other namespace (through the agent, the only way into it);
# `--mca btl tcp,self` leaves the ranks no transport but TCP.
grep -qx "${net}2" "$T/launched" || { echo "FAIL: no daemon was launched for ${net}2"; exit 1; }
grep -h "pipeline stage" "$T/err"
python3 - "$T/one.json" "$T/two.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["prompt_ids", "output_ids", "finish_reason", "logprobs"]
diff = [k for k in keys if a.get(k) != b.get(k)]
print("FAIL: differs in " + ", ".join(diff) if diff else "ok: two namespaces over TCP equal one process", b["output_ids"])
sys.exit(1 if diff else 0)
PY
