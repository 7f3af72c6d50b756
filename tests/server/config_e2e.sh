#!/bin/bash
# A config mistake never opens or quietly changes a server (issue 27 items 1, 2 and 7), on the
# built gpu-server and the fake driver:
#  - each file of the issue's list is refused at start: exit non-zero, its error reported once
#    with FILE:LINE, nothing listening;
#  - a bad flag value is refused the same way; gpu-server --check-config says 0 or 1;
#  - with no tenant the server warns that it is open, and /status says so; with
#    require_tenants = yes it does not start;
#  - on SIGHUP a bad file is refused at error level with its real path and line, and the running
#    config stays (a typo that would open the server leaves it closed); require_tenants = yes
#    refuses a reload that drops every tenant;
#  - a FIFO as the config (server) or as RGPU_CONFIG / RGPU_TOKEN_FILE (rgpu) is refused at once.
# Usage: config_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
RGPU=$BUILD/bin/rgpu
export LD_LIBRARY_PATH=$BUILD/lib
HEX=$("$SERVER" --hash-token alpha-secret)

# ---- items 1 and 2: each file refused at start, its error once, with its line ----
# name|line|message|file text (printf format)
CASES=(
    "Tenant|2|unknown section '[Tenant a]'|[server]\n[Tenant a]\ntoken = x\n"
    "tenants|1|unknown section '[tenants a]'|[tenants a]\ntoken = x\n"
    "tab|1|expected [tenant NAME]|[tenant\ta]\ntoken = x\n"
    "empty-name|1|expected [tenant NAME]|[tenant ]\ntoken = x\n"
    "nul|2|a NUL byte|[server]\n\0\n[tenant a]\ntoken = x\n"
    "sever|1|unknown section '[sever]'|[sever]\nport = 7070\n[tenant a]\ntoken = x\n"
    "port-70000|2|'port = 70000': expected a whole number from 0 to 65535|[server]\nport = 70000\n"
    "port-99999|2|'port = 99999': expected a whole number|[server]\nport = 99999\n"
    "port-52O90|2|'port = 52O90': expected a whole number|[server]\nport = 52O90\n"
    "port-seventy|2|'port = seventy': expected a whole number|[server]\nport = seventy\n"
    "cap|3|'cap = 0.04%%': below the smallest cap|[tenant a]\ntoken = x\ncap = 0.04%%\n"
    "hex-plus|2|invalid setting 'token_sha256': expected 64 hex digits|[tenant a]\ntoken_sha256 = ${HEX:0:10}+${HEX:11}\n"
    "duplicate|5|[tenant a] is already at line 1|[tenant a]\ntoken = one\n[tenant b]\ntoken = b\n[tenant a]\ntoken = two\n"
    "token-and-hash|3|token and token_sha256 are both set|[tenant a]\ntoken = x\ntoken_sha256 = $HEX\n"
    "log-level|2|'log_level = verbose': expected one of|[server]\nlog_level = verbose\n"
    "busy-poll|2|'busy_poll_us = fast': expected a duration|[server]\nbusy_poll_us = fast\n"
    "nccl-timeout|2|'nccl_timeout = ten': expected a duration|[server]\nnccl_timeout = ten\n"
    "transport|2|'transport = rmda': expected one of auto, rdma, tcp|[server]\ntransport = rmda\n"
    "long-name|1|expected [tenant NAME]|[tenant $(printf 'n%.0s' $(seq 64))]\ntoken = x\n"
    "unknown-key|2|unknown key 'polcy' in [server]|[server]\npolcy = pack\n"
)
for c in "${CASES[@]}"; do
    IFS='|' read -r name line msg text <<<"$c"
    printf "$text" >"$WORK/$name.conf"
    timeout 10 "$SERVER" --config "$WORK/$name.conf" --listen 127.0.0.1 --port 0 --driver "$FAKE" \
        >"$WORK/$name.log" 2>&1
    rc=$?
    msg=${msg//%%/%}
    n=$(grep -cF "$WORK/$name.conf:$line: " "$WORK/$name.log")
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$n" = 1 ] && grep -qF "$msg" "$WORK/$name.log" &&
        ! grep -q "listening on" "$WORK/$name.log"; then
        ok "$name: refused at start (exit $rc), once, at line $line"
    else
        fail "$name: exit $rc, $n error(s) at line $line (wanted 1: $msg):"
        sed 's/^/    /' "$WORK/$name.log" | head -5
    fi
done
# More than 64 tenants: said as such, at the 65th
for i in $(seq 65); do printf '[tenant t%d]\ntoken = k%d\n' "$i" "$i"; done >"$WORK/many.conf"
timeout 10 "$SERVER" --config "$WORK/many.conf" --listen 127.0.0.1 --port 0 --driver "$FAKE" \
    >"$WORK/many.log" 2>&1
check "65 tenants: refused at the 65th, as too many (exit $?)" \
    grep -qF "$WORK/many.conf:129: [tenant t65]: more than 64 tenants" "$WORK/many.log"

# ---- flags through the same setters ----
timeout 10 "$SERVER" --listen 127.0.0.1 --port 70000 --driver "$FAKE" >"$WORK/flag.log" 2>&1
rc=$?
check "--port 70000 refused (exit $rc)" test "$rc" = 2 -a "$(grep -c 'expected a whole number from 0 to 65535' "$WORK/flag.log")" = 1
timeout 10 "$SERVER" --port 0 --transport rmda --driver "$FAKE" >"$WORK/flag2.log" 2>&1
check "--transport rmda refused (exit $?)" grep -q "\-\-transport rmda: expected one of auto, rdma, tcp" "$WORK/flag2.log"

# ---- --check-config ----
printf '[server]\nport = 7070\n[tenant a]\ntoken_sha256 = %s\n' "$HEX" >"$WORK/good.conf"
"$SERVER" --check-config "$WORK/good.conf" >"$WORK/check.out" 2>&1
rc=$?
check "--check-config on a valid file: exit $rc ($(cat "$WORK/check.out"))" test "$rc" = 0
"$SERVER" --check-config "$WORK/good.conf" "$WORK/sever.conf" "$WORK/cap.conf" >"$WORK/check.out" 2>&1
rc=$?
check "--check-config with two bad files: exit 1, each error once" \
    test "$rc" = 1 -a "$(grep -c "^$WORK/sever.conf:1: \|^$WORK/cap.conf:3: " "$WORK/check.out")" = 2
printf '[clinet]\npool = a\n' >"$WORK/clinet.conf"
printf 'polcy = pack\nlanes = -3\n' >"$WORK/polcy.conf"
"$SERVER" --check-config --client "$WORK/clinet.conf" "$WORK/polcy.conf" >"$WORK/ccheck.out" 2>&1
rc=$?
check "--check-config --client: [clinet], polcy, lanes = -3 refused (exit $rc)" \
    test "$rc" = 1 -a "$(grep -c "unknown section '\[clinet\]'\|unknown key 'polcy'\|'lanes = -3'" "$WORK/ccheck.out")" = 3

# ---- a server with no tenant: a warning and /status; require_tenants = yes: no start ----
PORT=$(free_port) MPORT=$(free_port)
printf '[server]\nmetrics_listen = 127.0.0.1:%s\n' "$MPORT" >"$WORK/open.conf"
"$SERVER" --config "$WORK/open.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/open.log" 2>&1 &
PIDS+=($!)
OPEN_PID=$!
wait_for "$WORK/open.log" "metrics on http" >/dev/null
check "no tenant: a warning at start" grep -q "gpu-server warn: $WORK/open.conf: no \[tenant NAME\] section: this server admits any client" "$WORK/open.log"
STATUS=$(python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:$MPORT/status',timeout=5).read().decode())" 2>&1)
check "no tenant: /status says tenants_configured 0" grep -q '"tenants_configured":0' <<<"$STATUS"
kill "$OPEN_PID"
printf '[server]\nrequire_tenants = yes\n' >"$WORK/require.conf"
timeout 10 "$SERVER" --config "$WORK/require.conf" --listen 127.0.0.1 --port 0 --driver "$FAKE" \
    >"$WORK/require.log" 2>&1
rc=$?
check "require_tenants = yes and no tenant: no start (exit $rc)" \
    test "$rc" != 0 -a "$rc" != 124 -a "$(grep -c "require_tenants = yes and no \[tenant NAME\]" "$WORK/require.log")" = 1

# ---- SIGHUP: a bad file refused with its path and line; the running config stays ----
cat >"$WORK/server.conf" <<CONF
[server]
require_tenants = yes
[tenant alpha]
token_sha256 = $HEX
CONF
PORT=$(free_port)
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "listening on" >/dev/null || exit 1
client() { $FLOOD --server "127.0.0.1:$PORT" --mode legit --count 3 --tenant "$1" --token "$2"; }
printf '[server]\nrequire_tenants = yes\n[Tenant alpha]\ntoken_sha256 = %s\n' "$HEX" >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
wait_for "$WORK/server.log" "SIGHUP: .* not loaded" >/dev/null
check "SIGHUP to a misspelled section: refused at error level, with the file's path and line" \
    grep -qF "gpu-server error: $WORK/server.conf:3: unknown section '[Tenant alpha]'" "$WORK/server.log"
check "... the error once" test "$(grep -c "unknown section '\[Tenant alpha\]'" "$WORK/server.log")" = 1
client nobody nope >"$WORK/anyone.json" 2>&1
check "... and the server stays closed to a client without a token" grep -q '"served": false' "$WORK/anyone.json"
client alpha alpha-secret >"$WORK/alpha.json" 2>&1
check "... and open to its tenant" grep -q '"served": true' "$WORK/alpha.json"
printf '[server]\nrequire_tenants = yes\n' >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
for _ in $(seq 50); do [ "$(grep -c 'not loaded' "$WORK/server.log")" = 2 ] && break; sleep 0.1; done
check "SIGHUP dropping every tenant under require_tenants = yes: refused" \
    grep -qF "$WORK/server.conf: require_tenants = yes and no [tenant NAME] section" "$WORK/server.log"
client nobody nope >"$WORK/anyone2.json" 2>&1
check "... and the server stays closed" grep -q '"served": false' "$WORK/anyone2.json"
printf '[server]\nport = 1\nport = 2\n' >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
for _ in $(seq 50); do [ "$(grep -c 'not loaded' "$WORK/server.log")" = 3 ] && break; sleep 0.1; done
check "SIGHUP to a key given twice: refused" grep -qF "$WORK/server.conf:3: 'port' is already set at line 2" "$WORK/server.log"
printf '[server]\nrequire_tenants = yes\n[tenant alpha]\ntoken_sha256 = %s\nweight = lots\n' "$HEX" >"$WORK/server.conf"
kill -HUP "$SERVER_PID"
for _ in $(seq 50); do [ "$(grep -c 'not loaded' "$WORK/server.log")" = 4 ] && break; sleep 0.1; done
check "SIGHUP to a bad value: refused with the file's path and line" \
    grep -qF "gpu-server error: $WORK/server.conf:5: invalid setting 'weight = lots'" "$WORK/server.log"
check "... never as /proc/self/fd/N (the memfd copy)" test "$(grep -c '/proc/self/fd' "$WORK/server.log")" = 0

# ---- item 7: FIFOs are refused, never waited on ----
refused_at_once() { # exit status, log file: not 0, not timeout(1)'s 124, and said why
    [ "$1" != 0 ] && [ "$1" != 124 ] && grep -q "not a regular file" "$2"
}
mkfifo "$WORK/fifo"
timeout 10 "$SERVER" --config "$WORK/fifo" --listen 127.0.0.1 --port 0 --driver "$FAKE" \
    >"$WORK/fifo.log" 2>&1
rc=$?
check "--config naming a FIFO: refused at once (exit $rc)" refused_at_once "$rc" "$WORK/fifo.log"
RGPU_CONFIG=$WORK/fifo timeout 10 "$RGPU" status >"$WORK/rgpu-fifo.log" 2>&1
rc=$?
check "RGPU_CONFIG naming a FIFO: rgpu status refuses it at once (exit $rc)" \
    refused_at_once "$rc" "$WORK/rgpu-fifo.log"
RGPU_TOKEN_FILE=$WORK/fifo RGPU_SERVER=127.0.0.1:$PORT timeout 10 "$RGPU" status \
    >"$WORK/token-fifo.log" 2>&1
rc=$?
check "RGPU_TOKEN_FILE naming a FIFO: refused at once (exit $rc)" \
    refused_at_once "$rc" "$WORK/token-fifo.log"

[ "$FAILS" = 0 ] || { echo "server log:"; tail -n 20 "$WORK/server.log"; }
exit $((FAILS > 0))
