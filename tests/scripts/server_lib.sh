# Sourced by the scripts that start `hearth serve` (they define fail and finish, and $tmp).

# server_ready NAME PID [POLL]: waits for the server started as PID, its stdout in
# $tmp/NAME.out, to print the port it listens on and then answer /health with 200; sets
# $server_port.  A server that exits, or does neither in time, fails the test (its stderr
# shown) and finishes the script.  POLL: seconds between looks (default 0.1).
server_ready() {
  local name=$1 pid=$2 poll=${3:-0.1} port="" code=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/$name.out" 2>/dev/null)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep "$poll"
  done
  if [ -z "$port" ]; then fail "server $name did not start"; cat "$tmp/$name.err"; finish; fi
  for _ in $(seq 1 600); do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
    [ "$code" = 200 ] && break
    sleep "$poll"
  done
  if [ "$code" != 200 ]; then fail "server $name never became healthy (/health $code)"; cat "$tmp/$name.err"; finish; fi
  server_port=$port
}
