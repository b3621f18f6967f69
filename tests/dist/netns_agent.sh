#!/bin/sh
# Open MPI's launch agent for tests/dist/netns_test.sh (mpirun --mca plm_rsh_agent): called like
# ssh, "netns_agent.sh [ssh options] HOST COMMAND...", it runs COMMAND in the network namespace
# that FP4LM_NETNS_MAP ("10.0.0.1=ns_a 10.0.0.2=ns_b") gives HOST, as ssh would on that machine.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1
shift
[ -n "${FP4LM_NETNS_LOG:-}" ] && echo "$host" >> "$FP4LM_NETNS_LOG"
for pair in $FP4LM_NETNS_MAP; do
  [ "${pair%%=*}" = "$host" ] && exec ip netns exec "${pair#*=}" sh -c "$*"
done
echo "netns_agent: no namespace for host $host in FP4LM_NETNS_MAP" >&2
exit 1
