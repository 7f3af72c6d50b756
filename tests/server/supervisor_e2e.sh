#!/bin/bash
# The supervisor's own guarantees (issue 15 items 6, 7, 12; issue 16's concurrent admission), on
# the fake driver:
#  - max_sessions = 0 for a tenant is refused at load ("unlimited" is spelled out);
#  - names from a Hello are logged printable (no forged log lines);
#  - a config that does not load on SIGHUP changes nothing, for new sessions either;
#  - after kill -9 of the supervisor no worker is left serving, and a restarted supervisor's
#    limits hold;
#  - many clients arriving at once: the server's and a tenant's max_sessions hold exactly, the
#    others get a clear refusal.
# Usage: supervisor_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
export LD_LIBRARY_PATH=$BUILD/lib
PORT=$(free_port)

start_server() { # log file
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
        >"$1" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_for "$1" "listening on"
}
client() { # tenant token [flood args...]: one session's JSON line
    local t=$1 k=$2; shift 2
    $FLOOD --server "127.0.0.1:$PORT" --mode legit --count 10 --tenant "$t" --token "$k" "$@"
}
served() { grep -c '"served": true' "$@" | awk -F: '{s += $NF} END {print s}'; }

# ---- item 12: max_sessions = 0 is an error; "unlimited" is accepted ----
printf '[tenant a]\ntoken = x\nmax_sessions = 0\n' >"$WORK/server.conf"
timeout 10 "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" \
    --driver "$FAKE" >"$WORK/zero.log" 2>&1
check "max_sessions = 0 refused at load (exit $?)" grep -q "invalid setting 'max_sessions = 0'" "$WORK/zero.log"

cat >"$WORK/server.conf" <<CONF
[server]
max_sessions = 5
[tenant alpha]
token = alpha-secret
max_sessions = unlimited
[tenant beta]
token = beta-secret
max_sessions = 3
CONF
start_server "$WORK/server.log" || exit 1

# ---- item 12: names are logged printable ----
client $'evil\nFORGED LINE' nope >/dev/null
check "a tenant name with a newline is logged escaped" grep -q "tenant 'evil\\\\x0aFORGED LINE'" "$WORK/server.log"
check "... and forges no log line" test "$(grep -c '^FORGED' "$WORK/server.log")" = 0

# ---- issue 16: clients arriving at once ----
for i in $(seq 12); do client alpha alpha-secret --hold 4 >"$WORK/race-$i.json" & done
wait_clients() { for p in $(jobs -p); do [ "$p" = "$SERVER_PID" ] || wait "$p"; done; }
wait_clients
check "12 clients at once, server max_sessions = 5: exactly 5 served" test "$(served "$WORK"/race-*.json)" = 5
check "... the others refused with the reason" \
    test "$(grep -l 'the server is full: 5 sessions and probes (max_sessions = 5)' "$WORK"/race-*.json | wc -l)" = 7
sleep 0.5
for i in $(seq 10); do client beta beta-secret --hold 4 >"$WORK/beta-$i.json" & done
wait_clients
check "10 clients of a tenant with max_sessions = 3 at once: exactly 3 served" \
    test "$(served "$WORK"/beta-*.json)" = 3
check "... the others refused with the reason (the tenant's limit, or the server's)" \
    test "$(grep -lE "session limit reached: tenant 'beta' already has 3 session\(s\)|the server is full" "$WORK"/beta-*.json | wc -l)" = 7

# ---- item 6: a bad config on SIGHUP keeps the old one, for new sessions too ----
cp "$WORK/server.conf" "$WORK/good.conf"
printf '[tenant alpha]\ntoken = alpha-secret\nmax_sessions = 0\n' >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
wait_for "$WORK/server.log" "SIGHUP: .* not loaded" >/dev/null
client alpha alpha-secret >"$WORK/after-bad.json"
check "after a bad SIGHUP a new session is still served" grep -q '"served": true' "$WORK/after-bad.json"
client beta beta-secret >"$WORK/after-bad-beta.json"
check "... and a tenant the bad file drops still exists" grep -q '"served": true' "$WORK/after-bad-beta.json"
sed 's/beta-secret/beta-rotated/' "$WORK/good.conf" >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
wait_for "$WORK/server.log" "SIGHUP: reloaded" >/dev/null
client beta beta-rotated >"$WORK/rotated.json"
check "a good SIGHUP then applies (a rotated token admitted)" grep -q '"served": true' "$WORK/rotated.json"
cp "$WORK/good.conf" "$WORK/server.conf"

# ---- item 7: kill -9 of the supervisor leaves no worker serving ----
client alpha alpha-secret --hold 20 >"$WORK/orphan.json" &
ORPHAN_CLIENT=$!
for _ in $(seq 300); do # its worker, however loaded the machine
    WORKER=$(children "$SERVER_PID" | head -1)
    [ -n "$WORKER" ] && grep -q "session .* from .*: worker pid $WORKER" "$WORK/server.log" && break
    sleep 0.1
done
kill -9 "$SERVER_PID"
sleep 0.5
running() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
check "after kill -9 of the supervisor its worker is gone" test -n "$WORKER" -a ! "$(running "$WORKER" && echo alive)"
wait "$ORPHAN_CLIENT" 2>/dev/null
start_server "$WORK/server2.log" || exit 1
for i in $(seq 7); do client alpha alpha-secret --hold 4 >"$WORK/restart-$i.json" & done
wait_clients
check "the restarted supervisor's max_sessions = 5 holds" test "$(served "$WORK"/restart-*.json)" = 5
# ---- item 8: /metrics and /status need a token off loopback ----
MPORT=$(free_port)
printf '[server]\nmetrics_listen = 0.0.0.0:%s\n' "$MPORT" >"$WORK/open.conf"
timeout 10 "$SERVER" --config "$WORK/open.conf" --listen 127.0.0.1 --port 0 --driver "$FAKE" \
    >"$WORK/open.log" 2>&1
check "metrics on a non-loopback address without metrics_token: refused at start (exit $?)" \
    grep -q "is not a loopback address: set metrics_token" "$WORK/open.log"
for attempt in 1 2 3; do # a port picked free may be taken before the bind (tests run in parallel)
    MPORT=$(free_port)
    PORT=$(free_port)
    printf '[server]\nmetrics_listen = 0.0.0.0:%s\nmetrics_token = m-secret\n' "$MPORT" >"$WORK/server.conf"
    start_server "$WORK/server3.log" >/dev/null && break
done
wait_for "$WORK/server3.log" "metrics on http" >/dev/null || exit 1
code() { python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": sys.argv[2]} if len(sys.argv) > 2 else {})
try:
    print(urllib.request.urlopen(req, timeout=5).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
check "/status without the token: 401" test "$(code "http://127.0.0.1:$MPORT/status")" = 401
check "/metrics with a wrong token: 401" test "$(code "http://127.0.0.1:$MPORT/metrics" "Bearer nope")" = 401
check "/status with the token: 200" test "$(code "http://127.0.0.1:$MPORT/status" "Bearer m-secret")" = 200
[ "$FAILS" = 0 ] || { echo "server logs:"; for f in "$WORK"/server*.log; do tail -n 20 "$f"; done; }
exit $((FAILS > 0))
