#!/bin/bash
# Bounded resources before authentication (issue 15 item 1), on the fake driver: floods and
# slowloris connections from tests/server/flood.py against gpu-server with small limits. No
# worker process exists for a peer that has not authenticated; connections over the per-peer
# limit are closed at once; a Hello at one byte a second, half a header, an idle session, a
# call cut inside its message and a copy stalled after 1 MiB are all ended by their deadlines;
# and a tenant's client connecting from another address is served throughout.
# Usage: preauth_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
export LD_LIBRARY_PATH=$BUILD/lib
PORT=$(free_port)
MPORT=$(free_port)

cat >"$WORK/server.conf" <<CONF
[server]
metrics_listen = 127.0.0.1:$MPORT
max_sessions = 6
max_pending = 48
max_pending_per_peer = 16
handshake_timeout_ms = 1000
recv_timeout_ms = 1000
idle_timeout = 2
[tenant alpha]
token = alpha-secret
[tenant mallory]
token = mallory-secret
max_sessions = 4
CONF
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "listening on" || exit 1

workers() { children "$SERVER_PID" | wc -l; }
# Server-side established connections on the session port.
established() {
    python3 -c 'import sys
port = "%04X" % int(sys.argv[1])
n = 0
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(f).readlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        n += local.endswith(":" + port) and state == "01"
print(n)' "$PORT"
}
legit() { $FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode legit --count 100 \
              --tenant alpha --token alpha-secret; }

# attack MODE COUNT [flood args...]: run it for 4 s; while it runs, sample the workers and the
# server's connections and run a legitimate client. Sets MOST_WORKERS, MOST_CONNS, LEGIT, RESULT.
attack() {
    local mode=$1 count=$2; shift 2
    $FLOOD --server "127.0.0.1:$PORT" --mode "$mode" --count "$count" --duration 4 "$@" \
        >"$WORK/$mode.json" &
    local fpid=$! n
    MOST_WORKERS=0 MOST_CONNS=0
    for _ in $(seq 12); do
        sleep 0.25
        n=$(workers); [ "$n" -gt "$MOST_WORKERS" ] && MOST_WORKERS=$n
        n=$(established); [ "$n" -gt "$MOST_CONNS" ] && MOST_CONNS=$n
    done
    LEGIT=$(legit)
    wait "$fpid"
    RESULT=$(cat "$WORK/$mode.json")
    echo "    $mode: $RESULT; at most $MOST_WORKERS worker(s), $MOST_CONNS connection(s); legit: $LEGIT"
}
field() { python3 -c 'import json,sys;print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

attack idle 200
check "idle flood: no worker forked" test "$MOST_WORKERS" = 0
check "idle flood: at most max_pending_per_peer (16) held at once (+1 legit)" test "$MOST_CONNS" -le 17
check "idle flood: every connection closed by the server" \
    test "$(field "$RESULT" closed_by_server)" = "$(field "$RESULT" opened)"
check "idle flood: a tenant's client from another address is served" test "$(field "$LEGIT" served)" = True

attack slow-hello 12 --tenant alpha --token alpha-secret
check "hello at one byte a second: no worker forked" test "$MOST_WORKERS" = 0
check "hello at one byte a second: closed at the handshake deadline" \
    test "$(field "$RESULT" closed_by_server)" = 12
check "hello at one byte a second: a tenant's client is served" test "$(field "$LEGIT" served)" = True

attack half-header 12
check "half a header: no worker forked" test "$MOST_WORKERS" = 0
check "half a header: closed at the handshake deadline" test "$(field "$RESULT" closed_by_server)" = 12

attack idle-auth 6 --tenant mallory --token mallory-secret
check "idle sessions: the tenant's max_sessions (4) holds" test "$(field "$RESULT" opened)" = 4
check "idle sessions: at most 4 workers besides the legit one" test "$MOST_WORKERS" -le 5
check "idle sessions: ended by idle_timeout" test "$(field "$RESULT" closed_by_server)" = 4
check "idle sessions: a tenant's client is served" test "$(field "$LEGIT" served)" = True

attack cut-call 4 --tenant mallory --token mallory-secret
check "a call cut inside its message: ended by recv_timeout_ms" \
    test "$(field "$RESULT" closed_by_server)" = 4
check "a call cut inside its message: a tenant's client is served" test "$(field "$LEGIT" served)" = True

attack stalled-copy 4 --tenant mallory --token mallory-secret
check "a copy stalled after 1 MiB: ended by recv_timeout_ms" \
    test "$(field "$RESULT" closed_by_server)" = 4
check "a copy stalled after 1 MiB: a tenant's client is served" test "$(field "$LEGIT" served)" = True

# Issue 27 item 4: the pre-Hello table held from 100 addresses (200 connections that send
# nothing, each reopened as soon as the server closes it, four times max_pending): a client that
# sends its Hello at once is still served (the server makes room by closing the oldest pending
# connection of the address holding the most, and reads a first frame already there at the
# accept), and the real client library, told "busy" when its own connection is the one closed,
# tries again within its connect timeout.
$FLOOD --server "127.0.0.1:$PORT" --mode reflood --count 200 --sources 100 --duration 6 \
    >"$WORK/reflood.json" &
FPID=$!
sleep 2
RAW=0 REAL=0
for i in 1 2 3 4 5; do
    r=$(legit)
    [ "$(field "$r" served)" = True ] && RAW=$((RAW + 1)) || echo "    raw Hello not served: $r"
done
for i in 1 2 3; do
    if as alpha alpha-secret timeout 60 "$BUILD/tests/integration/hold_memory" 1 0 \
        >"$WORK/hold-$i.out" 2>&1 && grep -q PASS "$WORK/hold-$i.out"; then
        REAL=$((REAL + 1))
    else
        echo "    client library not served: $(tail -1 "$WORK/hold-$i.out")"
    fi
done
wait "$FPID"
echo "    many-address flood: $(cat "$WORK/reflood.json"); prompt Hellos served $RAW of 5, client library $REAL of 3"
check "many-address flood: a prompt Hello is served (at least 4 of 5 without retrying)" test "$RAW" -ge 4
check "many-address flood: the client library is served 3 of 3" test "$REAL" = 3
check "many-address flood: the flood was closed and reopened (the table was full)" \
    test "$(field "$(cat "$WORK/reflood.json")" closed_by_server)" -gt 200

# /metrics and /status (item 8): 100 idle connections hold at most 32 descriptors of the
# supervisor (the rest wait in the kernel's backlog), and the session port is served meanwhile.
FDS_BEFORE=$(ls "/proc/$SERVER_PID/fd" | wc -l)
$FLOOD --server "127.0.0.1:$MPORT" --mode idle --count 100 --duration 3 >"$WORK/metrics.json" &
FPID=$!
sleep 1.5
FDS_DURING=$(ls "/proc/$SERVER_PID/fd" | wc -l)
LEGIT=$(legit)
wait "$FPID"
echo "    metrics flood: supervisor descriptors $FDS_BEFORE before, $FDS_DURING during"
check "idle connections to /metrics: at most 32 held" test "$FDS_DURING" -le $((FDS_BEFORE + 32))
check "idle connections to /metrics: a tenant's client is served" test "$(field "$LEGIT" served)" = True

sleep 1
check "no worker left" test "$(workers)" = 0
check "the stalled copy's worker logged why it ended" \
    grep -q "a message stopped arriving (recv_timeout_ms); ending the session" "$WORK/server.log"
check "idle sessions' workers logged why they ended" grep -q "no call for 2 s (idle_timeout)" "$WORK/server.log"
[ "$FAILS" = 0 ] || { echo "server log:"; sed 's/^/    /' "$WORK/server.log" | tail -60; }
exit $((FAILS > 0))
