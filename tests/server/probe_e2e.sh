#!/bin/bash
# Probes are charged to whoever asked (issue 27 items 3 and 6), on the fake driver: a tenant with
# max_sessions = 2 that asks for 10 probes at once, each kept alive by Echo frames, is answered
# twice and refused the rest, while another tenant's session and probe are served; probes count
# against the server's max_sessions; an Echo too large to send back ends its connection instead
# of pinning memory in the worker; and on a server without tenants a probe's tenant name is
# logged escaped.
# Usage: probe_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
export LD_LIBRARY_PATH=$BUILD/lib
field() { python3 -c 'import json,sys;print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
start() { # name config-file -> PORT, SERVER_PID
    PORT=$(free_port)
    "$SERVER" --config "$2" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_for "$WORK/$1.log" "listening on" || exit 1
}

cat >"$WORK/server.conf" <<CONF
[server]
max_sessions = 8
[tenant mallory]
token = mallory-secret
max_sessions = 2
[tenant alpha]
token = alpha-secret
CONF
start tenants "$WORK/server.conf"

$FLOOD --server "127.0.0.1:$PORT" --mode probe-hold --count 10 --duration 4 --tenant mallory \
    --token mallory-secret >"$WORK/hold.json" &
FPID=$!
sleep 2
MOST=$(children "$SERVER_PID" | wc -l)
LEGIT=$($FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode legit --count 20 \
            --tenant alpha --token alpha-secret)
ALPHA=$($FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode probe-hold --count 1 \
            --duration 1 --tenant alpha --token alpha-secret)
wait "$FPID"
HOLD=$(cat "$WORK/hold.json")
echo "    mallory: $HOLD; $MOST worker(s) while held; alpha: $LEGIT; alpha's probe: $ALPHA"
check "a tenant with max_sessions = 2 is answered 2 probes of 10 at once" \
    test "$(field "$HOLD" answered)" = 2
check "... the 2 stay answered (echoes) to the end" test "$(field "$HOLD" alive_at_end)" = 2
check "... the other 8 are refused for the tenant's limit" \
    grep -q '"the tenant has 2 probes in progress here, its limit (max_sessions = 2)": 8' "$WORK/hold.json"
check "... so it holds 2 worker processes" test "$MOST" = 2
check "another tenant's session is served meanwhile" test "$(field "$LEGIT" served)" = True
check "another tenant's probe is answered meanwhile" test "$(field "$ALPHA" answered)" = 1

# The server's max_sessions counts probes with sessions: alpha (no limit of its own) asks 12.
for _ in $(seq 50); do [ "$(children "$SERVER_PID" | wc -l)" = 0 ] && break; sleep 0.1; done
HOLD=$($FLOOD --server "127.0.0.1:$PORT" --mode probe-hold --count 12 --duration 1 --tenant alpha \
           --token alpha-secret)
echo "    alpha, 12 probes: $HOLD"
check "server max_sessions = 8: 8 probes of 12 answered" test "$(field "$HOLD" answered)" = 8
check "... the other 4 told the server is full" \
    grep -q 'the server is full: 8 sessions and probes (max_sessions = 8)": 4' <<<"$HOLD"

# Echo: sent back up to PROTO_ECHO_BACK_MAX (64 KiB); a larger one ends the connection.
SMALL=$($FLOOD --server "127.0.0.1:$PORT" --mode probe-echo --echo-bytes 65536 --tenant alpha \
            --token alpha-secret)
BIG=$($FLOOD --server "127.0.0.1:$PORT" --mode probe-echo --echo-bytes $((64 << 20)) \
          --tenant alpha --token alpha-secret)
echo "    echo 64 KiB: $SMALL; echo 64 MiB: $BIG"
check "an Echo of 64 KiB is sent back" test "$(field "$SMALL" echoed)" = True
check "an Echo of 64 MiB is not (the connection ends)" test "$(field "$BIG" echoed)" = False
check "... and the worker says why" grep -q "echo of 67108864 bytes ends the echo" "$WORK/tenants.log"

# Item 6: a server without tenants logs a probe's tenant name escaped.
printf '[server]\nmax_sessions = 4\n' >"$WORK/open.conf"
start open "$WORK/open.conf"
NAMED=$($FLOOD --server "127.0.0.1:$PORT" --mode probe-name --tenant $'evil\nFORGED LINE' --token x)
sleep 0.5
check "open server: a probe naming any tenant is answered" test "$(field "$NAMED" answered)" = True
check "... its tenant name is logged escaped" grep -q "tenant 'evil\\\\x0aFORGED LINE'" "$WORK/open.log"
check "... and forges no log line" test "$(grep -c '^FORGED' "$WORK/open.log")" = 0

[ "$FAILS" = 0 ] || { echo "server logs:"; tail -40 "$WORK/tenants.log" "$WORK/open.log" | sed 's/^/    /'; }
exit $((FAILS > 0))
