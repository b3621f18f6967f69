#!/usr/bin/env bash
# N independent `fp4lm serve` replicas behind one nginx (Debian's `nginx`), from
# examples/nginx/fp4lm-replicas.conf.in, on this machine:
#
#   scripts/replicas.sh --replicas 2 --port 8000 -- --model DIR --served-model-name m --threads 1
#
# starts replica i on 127.0.0.1:(PORT+1+i) with the arguments after `--`, waits until each answers
# /health, then runs nginx on --host:--port (config, logs, pid and temp files in a temporary prefix,
# removed at exit; --prefix DIR keeps them in DIR). It stays in the foreground: Ctrl-C or SIGTERM
# stops nginx and every replica (SIGTERM: in-flight requests get the replicas' --shutdown-grace)
# and exits 0. A replica that dies is reported and routed around; when nginx or the last replica
# dies, everything is stopped and the exit status is 1. Usage errors exit 2.
#
# For replicas elsewhere (one per machine), print the rendered config instead:
#   scripts/replicas.sh --print-config --listen 0.0.0.0:8000 --prefix /var/lib/fp4lm-lb \
#       --upstream 10.0.0.11:8000 --upstream 10.0.0.12:8000
# With --upstream and no --print-config, nginx alone is started in front of those replicas.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
template="$here/../examples/nginx/fp4lm-replicas.conf.in"

usage() {  # usage EXIT_STATUS
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  cat >&2 <<'EOF'
Options:
  --replicas N           replicas to start (default 2)
  --host ADDR            nginx listen address (default 127.0.0.1)
  --port P               nginx listen port (default 8000)
  --listen ADDR:PORT     the same as --host and --port together
  --replica-ports A,B,.. the replicas' ports (default PORT+1 ...; sets N)
  --upstream HOST:PORT   an existing replica (repeatable): start none
  --prefix DIR           nginx prefix and logs (default: a temporary directory, removed at exit)
  --fp4lm BIN            fp4lm binary (default: build/fp4lm of this checkout, else fp4lm on PATH)
  --nginx BIN            nginx binary (default: nginx on PATH or /usr/sbin/nginx)
  --ready-timeout S      seconds each replica may take to answer /health (default 300)
  --print-config         print the rendered nginx.conf and exit
EOF
  exit "$1"
}
die_usage() { echo "replicas.sh: $*" >&2; exit 2; }
log() { echo "replicas.sh: $*" >&2; }

replicas=2
host=127.0.0.1
port=8000
replica_ports=""
upstreams=()
prefix=""
fp4lm=""
nginx_bin=""
ready_timeout=300
print_config=0
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) [ $# -ge 2 ] || die_usage "$1 needs a value"; replicas="$2"; shift 2 ;;
    --host) [ $# -ge 2 ] || die_usage "$1 needs a value"; host="$2"; shift 2 ;;
    --port) [ $# -ge 2 ] || die_usage "$1 needs a value"; port="$2"; shift 2 ;;
    --listen) [ $# -ge 2 ] || die_usage "$1 needs a value"; host="${2%:*}"; port="${2##*:}"; shift 2 ;;
    --replica-ports) [ $# -ge 2 ] || die_usage "$1 needs a value"; replica_ports="$2"; shift 2 ;;
    --upstream) [ $# -ge 2 ] || die_usage "$1 needs a value"; upstreams+=("$2"); shift 2 ;;
    --prefix) [ $# -ge 2 ] || die_usage "$1 needs a value"; prefix="$2"; shift 2 ;;
    --fp4lm) [ $# -ge 2 ] || die_usage "$1 needs a value"; fp4lm="$2"; shift 2 ;;
    --nginx) [ $# -ge 2 ] || die_usage "$1 needs a value"; nginx_bin="$2"; shift 2 ;;
    --ready-timeout) [ $# -ge 2 ] || die_usage "$1 needs a value"; ready_timeout="$2"; shift 2 ;;
    --print-config) print_config=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) die_usage "unknown option '$1' (fp4lm serve's options go after --; --help lists these)" ;;
  esac
done
serve_args=("$@")

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die_usage "--port: expected 1..65535, found '$port'"
is_uint "$ready_timeout" || die_usage "--ready-timeout: expected whole seconds, found '$ready_timeout'"

# The replicas: HOST:PORT for each, started here unless given with --upstream.
start_replicas=1
if [ ${#upstreams[@]} -gt 0 ]; then
  start_replicas=0
  [ -z "$replica_ports" ] || die_usage "--replica-ports and --upstream exclude each other"
  for u in "${upstreams[@]}"; do
    [[ "$u" =~ ^[^:[:space:]]+:[0-9]+$ ]] || die_usage "--upstream: expected HOST:PORT, found '$u'"
  done
else
  if [ -n "$replica_ports" ]; then
    IFS=, read -r -a ports <<<"$replica_ports"
  else
    is_uint "$replicas" && [ "$replicas" -ge 1 ] || die_usage "--replicas: expected a count >= 1, found '$replicas'"
    ports=()
    for ((i = 0; i < replicas; i++)); do ports+=($((port + 1 + i))); done
  fi
  for p in "${ports[@]}"; do
    is_uint "$p" && [ "$p" -ge 1 ] && [ "$p" -le 65535 ] || die_usage "--replica-ports: expected ports 1..65535, found '$p'"
    [ "$p" != "$port" ] || die_usage "replica port $p is nginx's --port"
    upstreams+=("127.0.0.1:$p")
  done
fi
[ -r "$template" ] || { log "cannot read the nginx template $template"; exit 1; }

# Renders the template: @LISTEN@, @PREFIX@, and the three generated blocks at their indentation.
render_config() {
  local line indent i
  while IFS= read -r line; do
    indent="${line%%[! ]*}"
    case "$line" in
      *@UPSTREAM_SERVERS@*)
        for u in "${upstreams[@]}"; do echo "${indent}server $u max_fails=1 fail_timeout=10s;"; done ;;
      *@REPLICA_UPSTREAMS@*)
        for i in "${!upstreams[@]}"; do echo "${indent}upstream fp4lm_replica_$i { server ${upstreams[$i]}; }"; done ;;
      *@REPLICA_INDICES@*)
        for i in "${!upstreams[@]}"; do echo "${indent}$i 1;"; done ;;
      *)
        line="${line//@LISTEN@/$host:$port}"
        echo "${line//@PREFIX@/$prefix}" ;;
    esac
  done <"$template"
}

if [ "$print_config" = 1 ]; then
  [ -n "$prefix" ] || die_usage "--print-config needs --prefix DIR (where nginx keeps its pid, logs and temp files)"
  render_config
  exit 0
fi
if [ "$start_replicas" = 1 ] && ! printf '%s\n' "${serve_args[@]}" | grep -qE -- '^--model(=.*)?$'; then
  die_usage "fp4lm serve needs --model DIR after -- (e.g. $0 -- --model DIR)"
fi

if [ -z "$nginx_bin" ]; then
  nginx_bin="$(command -v nginx || true)"
  [ -n "$nginx_bin" ] || { [ -x /usr/sbin/nginx ] && nginx_bin=/usr/sbin/nginx; } || true
fi
[ -n "$nginx_bin" ] && [ -x "$nginx_bin" ] || { log "nginx is not installed (Debian: apt-get install nginx, or bash scripts/setup.sh)"; exit 1; }
if [ "$start_replicas" = 1 ]; then
  if [ -z "$fp4lm" ]; then
    if [ -x "$here/../build/fp4lm" ]; then fp4lm="$here/../build/fp4lm"; else fp4lm="$(command -v fp4lm || true)"; fi
  fi
  [ -n "$fp4lm" ] && [ -x "$fp4lm" ] || { log "no fp4lm binary (build it: make build, or pass --fp4lm BIN)"; exit 1; }
fi

keep_prefix=1
if [ -z "$prefix" ]; then
  prefix="$(mktemp -d "${TMPDIR:-/tmp}/fp4lm-replicas.XXXXXX")"
  keep_prefix=0
fi
mkdir -p "$prefix/tmp"
prefix="$(cd "$prefix" && pwd)"

# Every process this script starts, for the cleanup.
replica_pids=()
nginx_pid=""
stopping=0

# HTTP status of GET PATH on HOST:PORT (bash's /dev/tcp: no curl needed), or 000.
http_status() {
  local code
  code="$( (exec 3<>"/dev/tcp/$1/$2" && printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$1" >&3 &&
            read -r -t 5 _ c _ <&3 && echo "$c") 2>/dev/null || true)"
  echo "${code:-000}"
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Stops nginx (graceful: it lets open streams end) and the replicas (SIGTERM: their
# --shutdown-grace), then SIGKILLs whatever is left after 30 s.
cleanup() {
  local status=$1 p deadline
  stopping=1
  trap - INT TERM
  log "stopping nginx and the replicas"
  alive "$nginx_pid" && kill -QUIT "$nginx_pid" 2>/dev/null || true
  for p in "${replica_pids[@]}"; do alive "$p" && kill -TERM "$p" 2>/dev/null || true; done
  deadline=$((SECONDS + 30))
  for p in "$nginx_pid" "${replica_pids[@]}"; do
    [ -n "$p" ] || continue
    while alive "$p" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if alive "$p"; then log "pid $p did not stop in 30 s: SIGKILL"; kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
  if [ "$keep_prefix" = 0 ]; then rm -rf "$prefix"; else rm -f "$prefix"/replica-*.pid; fi
  exit "$status"
}
trap 'cleanup 0' INT TERM
trap 'if [ "$stopping" = 0 ]; then cleanup 1; fi' EXIT

if [ "$start_replicas" = 1 ]; then
  for i in "${!ports[@]}"; do
    # Each replica's log lines on stderr, prefixed with its index.
    "$fp4lm" serve --host 127.0.0.1 --port "${ports[$i]}" "${serve_args[@]}" \
      > >(sed -u "s/^/[replica $i] /" >&2) 2>&1 &
    replica_pids+=($!)
    echo "${replica_pids[$i]}" >"$prefix/replica-$i.pid"
    log "replica $i: pid ${replica_pids[$i]} on 127.0.0.1:${ports[$i]}"
  done
  for i in "${!ports[@]}"; do
    deadline=$((SECONDS + ready_timeout))
    until [ "$(http_status 127.0.0.1 "${ports[$i]}" /health)" = 200 ]; do
      alive "${replica_pids[$i]}" || { log "replica $i exited before it was ready (its log is above)"; cleanup 1; }
      [ $SECONDS -lt $deadline ] || { log "replica $i not ready in ${ready_timeout} s"; cleanup 1; }
      sleep 0.1 & wait $!
    done
  done
fi

render_config >"$prefix/nginx.conf"
if ! out="$("$nginx_bin" -t -q -p "$prefix" -c "$prefix/nginx.conf" -g 'daemon off;' 2>&1)"; then
  log "nginx rejects $prefix/nginx.conf:"
  echo "$out" >&2
  cleanup 1
fi
"$nginx_bin" -p "$prefix" -c "$prefix/nginx.conf" -g 'daemon off;' 2> >(sed -u 's/^/[nginx] /' >&2) &
nginx_pid=$!
deadline=$((SECONDS + 30))
until [ "$(http_status "$host" "$port" /health)" = 200 ]; do
  alive "$nginx_pid" || { log "nginx exited at start (its error is above; config: $prefix/nginx.conf)"; cleanup 1; }
  [ $SECONDS -lt $deadline ] || { log "nginx not answering /health on $host:$port in 30 s"; cleanup 1; }
  sleep 0.1 & wait $!
done
log "ready: http://$host:$port -> ${upstreams[*]} (per replica: /replica/N/metrics, /replica/N/health; prefix $prefix)"

# Foreground until a signal, nginx's exit, or the last replica's.
reported=()
while true; do
  sleep 1 & wait $! || true
  alive "$nginx_pid" || { wait "$nginx_pid" 2>/dev/null; log "nginx exited (status $?): stopping"; cleanup 1; }
  [ "$start_replicas" = 1 ] || continue
  live=0
  for i in "${!replica_pids[@]}"; do
    if alive "${replica_pids[$i]}"; then
      live=$((live + 1))
    elif [ -z "${reported[$i]:-}" ]; then
      reported[$i]=1
      wait "${replica_pids[$i]}" 2>/dev/null && st=0 || st=$?
      log "replica $i (pid ${replica_pids[$i]}) exited with status $st; nginx routes around it"
    fi
  done
  [ "$live" -gt 0 ] || { log "every replica has exited: stopping"; cleanup 1; }
done
