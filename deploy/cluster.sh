#!/usr/bin/env bash
# N hearth replicas on loopback ports behind one HAProxy (deploy/haproxy.cfg) that routes on
# prefix affinity.  Everything a run starts is recorded under --dir (pids, ports, logs, the
# rendered haproxy.cfg), so that `stop` ends exactly those processes.
#
#   deploy/cluster.sh start --model DIR [--replicas 3] [--port 8000] [--replica-port 8001]
#                           [--stats-port 8404] [--balance hash|roundrobin] [--dir RUNDIR]
#                           [--wait SECONDS] [-- ARGS for every `hearth serve`]
#   deploy/cluster.sh stop [--dir RUNDIR] [--grace S]  graceful: HAProxy first (soft stop,
#                                                   in-flight requests finish), then the replicas
#   deploy/cluster.sh replica I [--dir RUNDIR]      (re)start replica I with its recorded flags
#   deploy/cluster.sh status [--dir RUNDIR]         each process, /health, HAProxy's view
#   deploy/cluster.sh render --server ADDR... [--port P] [--stats-port S] [--balance B]
#                                                   print the HAProxy config for those replicas
#
# Replicas listen on 127.0.0.1:REPLICA_PORT+i (REPLICA_PORT 0: any free port each), are named
# r1..rN (hearth's --instance-name, so /metrics tells them apart) and log to RUNDIR/rI.log.
# The proxy listens on 127.0.0.1:PORT, its stats page and Prometheus exporter on STATS_PORT.
# --wait: return once every replica is healthy and HAProxy sees it up (0: do not wait).
# stop: HAProxy gets SIGUSR1 (soft stop: it closes its listeners and exits once the requests
# it proxies are done), within --grace seconds (30; then SIGTERM, which cuts them); then each
# replica gets SIGTERM (hearth's graceful stop, bounded by its --shutdown-grace-ms), and
# SIGKILL if it is still there --grace seconds later.
# $HEARTH_BIN (default build/hearth, else hearth on PATH) and $HAPROXY (haproxy) name the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cfg_template=$here/haproxy.cfg

die() { echo "cluster.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^[^#]/ { /^#/ p }' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}; [ -n "$cmd" ] || usage; shift
dir=${XDG_RUNTIME_DIR:-/tmp}/hearth-cluster
model=""; replicas=3; port=8000; rport=""; sport=8404; balance=hash; wait_s=120; grace=30
servers=(); extra=(); index=""
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=${2:?}; shift 2 ;;
    --replicas) replicas=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --replica-port) rport=${2:?}; shift 2 ;;
    --stats-port) sport=${2:?}; shift 2 ;;
    --balance) balance=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --wait) wait_s=${2:?}; shift 2 ;;
    --grace) grace=${2:?}; shift 2 ;;
    --server) servers+=("${2:?}"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) if [ "$cmd" = replica ] && [ -z "$index" ]; then index=$1; shift; else die "unknown argument '$1'"; fi ;;
  esac
done
case $balance in hash|roundrobin) ;; *) die "--balance must be hash or roundrobin, got '$balance'" ;; esac
for n in "$replicas" "$port" "$sport" "$wait_s" "$grace" ${rport:+"$rport"}; do
  [[ $n =~ ^[0-9]+$ ]] || die "not a number: '$n'"
done
[ -n "$rport" ] || rport=$((port + 1))

hearth_bin() {
  if [ -n "${HEARTH_BIN:-}" ]; then echo "$HEARTH_BIN"
  elif [ -x "$here/../build/hearth" ]; then echo "$here/../build/hearth"
  else command -v hearth || die "no hearth binary (set HEARTH_BIN)"; fi
}

# render: the template with this run's proxy port, stats port, balance and servers
render() {
  SERVERS="${servers[*]}" awk -v port="$port" -v sport="$sport" -v balance="$balance" '
    /^[a-z]/ { section = $1 " " $2 }
    section == "frontend hearth" && $1 == "bind" { print "    bind 127.0.0.1:" port; next }
    section == "frontend stats" && $1 == "bind" { print "    bind 127.0.0.1:" sport; next }
    section == "backend replicas" && $1 == "balance" {
      print "    balance " (balance == "hash" ? "hash var(txn.route_key)" : "roundrobin"); next }
    /^ *# replicas begin *$/ { print; skip = 1; n = split(ENVIRON["SERVERS"], s, " ")
      for (i = 1; i <= n; i++) print "    server r" i " " s[i]
      next }
    /^ *# replicas end *$/ { skip = 0 }
    !skip { print }' "$cfg_template"
}

# alive PID NAME: PID runs and is the NAME we started (not a reused pid)
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }

# start_replica I PORT: starts `hearth serve` for replica I; prints its port once it listens
start_replica() {
  local i=$1 p=$2 bin; bin=$(hearth_bin)
  local args=(); mapfile -d '' -t args <"$dir/serve.args"
  "$bin" serve --host 127.0.0.1 --port "$p" --instance-name "r$i" "${args[@]}" >"$dir/r$i.out" 2>>"$dir/r$i.log" &
  local pid=$! got=""
  echo "$pid" >"$dir/r$i.pid"
  for _ in $(seq 1 300); do
    got=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$dir/r$i.out")
    [ -n "$got" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$got" ] || { tail -n 20 "$dir/r$i.log" >&2; die "replica r$i did not start (see $dir/r$i.log; \`$0 stop --dir $dir\` ends the others)"; }
  echo "$got" >"$dir/r$i.port"
  echo "$got"
}

health() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health" 2>/dev/null || true; }
# haproxy_up I: HAProxy's stats say replica rI is UP
haproxy_up() {
  curl -s -m 2 "http://127.0.0.1:$(cat "$dir/stats.port")/stats;csv" 2>/dev/null |
    awk -F, -v s="r$1" '$1 == "replicas" && $2 == s { print $18 }' | grep -q '^UP'
}

wait_ready() { # every replica healthy and up in HAProxy, within $wait_s seconds
  [ "$wait_s" -gt 0 ] || return 0
  local n; n=$(cat "$dir/replicas") deadline=$((SECONDS + wait_s))
  for i in $(seq 1 "$n"); do
    until [ "$(health "$(cat "$dir/r$i.port")")" = 200 ] && haproxy_up "$i"; do
      [ $SECONDS -lt $deadline ] || die "replica r$i not ready after ${wait_s}s (see $dir/r$i.log)"
      alive "$(cat "$dir/r$i.pid")" hearth ||
        { tail -n 5 "$dir/r$i.log" >&2; die "replica r$i exited (see $dir/r$i.log)"; }
      alive "$(cat "$dir/haproxy.pid")" haproxy || { tail -n 5 "$dir/haproxy.log" >&2; die "haproxy exited"; }
      sleep 0.2
    done
  done
}

# stop_pid FILE NAME [SIGNAL]: SIGNAL (TERM), wait up to $grace s for the exit, then the next
# signal: TERM after a soft one (HAProxy's USR1), KILL after TERM
stop_pid() {
  local pid; pid=$(cat "$1" 2>/dev/null || true)
  rm -f "$1"
  local sig
  for sig in ${3:-} TERM KILL; do
    alive "$pid" "$2" || return 0
    kill -"$sig" "$pid" 2>/dev/null || true
    [ "$sig" = KILL ] && return 0
    local deadline=$((SECONDS + grace))
    while alive "$pid" "$2" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  done
}

case $cmd in
  render)
    [ ${#servers[@]} -gt 0 ] || die "render needs --server ADDR (one per replica)"
    render ;;
  start)
    [ -n "$model" ] || die "start needs --model DIR"
    [ "$replicas" -ge 1 ] || die "--replicas must be at least 1"
    command -v "${HAPROXY:-haproxy}" >/dev/null || die "no haproxy (apt-get install haproxy)"
    mkdir -p "$dir"
    for f in "$dir"/*.pid; do [ -e "$f" ] && die "$dir has a running cluster (stop it first)"; done
    rm -f "$dir"/r*.log "$dir"/haproxy.log
    printf '%s\0' --model "$model" "${extra[@]}" >"$dir/serve.args"
    echo "$replicas" >"$dir/replicas"
    echo "$sport" >"$dir/stats.port"
    echo "$port" >"$dir/proxy.port"
    for i in $(seq 1 "$replicas"); do
      p=$rport; [ "$rport" -gt 0 ] && p=$((rport + i - 1))
      servers+=("127.0.0.1:$(start_replica "$i" "$p")")
    done
    render >"$dir/haproxy.cfg"
    "${HAPROXY:-haproxy}" -c -q -f "$dir/haproxy.cfg" || die "haproxy rejects $dir/haproxy.cfg"
    "${HAPROXY:-haproxy}" -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
    echo $! >"$dir/haproxy.pid"
    wait_ready
    echo "cluster: http://127.0.0.1:$port -> ${servers[*]} (balance $balance; stats http://127.0.0.1:$sport/stats; run dir $dir)" ;;
  replica)
    [[ $index =~ ^[0-9]+$ ]] && [ -f "$dir/r$index.port" ] || die "replica needs the index of a replica of $dir"
    stop_pid "$dir/r$index.pid" hearth
    start_replica "$index" "$(cat "$dir/r$index.port")" >/dev/null
    echo "replica r$index: http://127.0.0.1:$(cat "$dir/r$index.port")" ;;
  stop)
    [ -f "$dir/replicas" ] || die "no cluster in $dir"
    # the proxy first, softly: no new connections, the requests it carries run to their end
    # on replicas that are still up
    stop_pid "$dir/haproxy.pid" haproxy USR1
    for f in "$dir"/r*.pid; do [ -e "$f" ] && stop_pid "$f" hearth; done
    echo "cluster in $dir stopped" ;;
  status)
    [ -f "$dir/replicas" ] || die "no cluster in $dir"
    for i in $(seq 1 "$(cat "$dir/replicas")"); do
      pid=$(cat "$dir/r$i.pid" 2>/dev/null || true); p=$(cat "$dir/r$i.port")
      state=down; alive "$pid" hearth && state="pid $pid, /health $(health "$p")"
      haproxy_up "$i" && hx=UP || hx=DOWN
      echo "r$i 127.0.0.1:$p: $state; haproxy: $hx"
    done ;;
  *) usage ;;
esac
