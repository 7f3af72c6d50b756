#!/bin/bash
# The client library against servers that refuse for load or are not gpu-servers (issue 27 items
# 4 and 11), on the fake driver: told "the server is full", a client tries again with backoff
# within its connect timeout and is served once a session ends; with a connect timeout too short
# for that it fails naming the tries; and pointed at a port that answers HTTP, it hears "not a
# gpu-server" with what the port answered, not "closed the connection".
# Usage: client_retry_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
HOLD=$BUILD/tests/integration/hold_memory
export LD_LIBRARY_PATH=$BUILD/lib
PORT=$(free_port)
printf '[server]\nmax_sessions = 1\n[tenant alpha]\ntoken = alpha-secret\n' >"$WORK/server.conf"
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "listening on" || exit 1

# One session holds the only slot for 2 s; a second client started meanwhile is refused "full"
# and tries again until the first is gone (connect_timeout_ms 20 s: far more than it needs).
as alpha alpha-secret "$HOLD" 1 2 >"$WORK/first.out" 2>&1 &
FIRST=$!
wait_for "$WORK/first.out" ready >/dev/null || exit 1
RGPU_CONNECT_TIMEOUT_MS=20000 RGPU_LOG_LEVEL=info as alpha alpha-secret timeout 60 "$HOLD" 1 0 \
    >"$WORK/second.out" 2>&1
SECOND=$?
wait "$FIRST"
check "the first session is served" grep -q PASS "$WORK/first.out"
check "a client told 'the server is full' tries again and is served when the slot frees" \
    test "$SECOND" = 0
check "... it said it would try again" grep -q "the server is full.*trying again for up to 20000 ms" \
    "$WORK/second.out"
check "... and at which try it got in" grep -q "opened at try [0-9]" "$WORK/second.out"

# With a connect timeout shorter than the first session, the second fails, naming its tries.
as alpha alpha-secret "$HOLD" 1 3 >"$WORK/first.out" 2>&1 &
FIRST=$!
wait_for "$WORK/first.out" ready >/dev/null || exit 1
RGPU_CONNECT_TIMEOUT_MS=600 as alpha alpha-secret timeout 60 "$HOLD" 1 0 >"$WORK/third.out" 2>&1
THIRD=$?
wait "$FIRST"
check "a connect timeout too short to outlast the full server: the client fails" test "$THIRD" != 0
check "... naming the reason and its tries" \
    grep -q "refused the session: the server is full.*tries in [0-9]* ms)" "$WORK/third.out"

# A port that answers HTTP.
HTTP_PORT=$(free_port)
python3 - "$HTTP_PORT" >"$WORK/http.log" 2>&1 <<'PY' &
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(8)
print("listening", flush=True)
while True:
    c, _ = srv.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    c.close()
PY
PIDS+=($!)
wait_for "$WORK/http.log" listening >/dev/null || exit 1
RGPU_SERVER=127.0.0.1:$HTTP_PORT timeout 60 "$HOLD" 1 0 >"$WORK/http.out" 2>&1
check "a client pointed at an HTTP port fails" test $? != 0
check "... hearing it is not a gpu-server and what it answered" \
    grep -q "127.0.0.1:$HTTP_PORT is not a gpu-server (it answered \"HTTP/1.1 400 Bad Request" \
    "$WORK/http.out"
check "... not that it closed the connection" \
    test "$(grep -c "closed the connection during the handshake" "$WORK/http.out")" = 0

[ "$FAILS" = 0 ] || { for f in second third http; do echo "$f:"; sed 's/^/    /' "$WORK/$f.out"; done; }
exit $((FAILS > 0))
