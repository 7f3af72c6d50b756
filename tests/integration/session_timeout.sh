#!/bin/bash
# The session's keepalive end to end (issue 27 item 8), on the fake driver, over TCP or (with
# RGPU_TEST_TRANSPORT=rdma) over RDMA on tests/fakeverbs: with a session timeout of 2 s,
#  - a call the server's driver makes last 6 s (three times the timeout) succeeds: the worker
#    sends keepalives while it runs;
#  - a worker stopped (SIGSTOP) while its client calls: the waiting call fails with
#    CUDA_ERROR_DEVICE_UNAVAILABLE, and a later call too, instead of the client waiting for
#    ever (the test gives it 60 s, thirty times the timeout).
# Usage: session_timeout.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
SERVER=$BUILD/bin/gpu-server
FAKE=$BUILD/tests/fakecuda/libfakecuda.so
STALL=$BUILD/tests/integration/session_stall
WORK=$(mktemp -d)
export LD_LIBRARY_PATH=$BUILD/lib
FAKEVERBS_DIR=""
if [ "${RGPU_TEST_TRANSPORT:-tcp}" = rdma ]; then
    FAKEVERBS_DIR=$(mktemp -d /tmp/fakeverbs.XXXXXX)
    export FAKEVERBS_DIR RGPU_TRANSPORT=rdma LD_LIBRARY_PATH=$BUILD/tests/fakeverbs/lib:$LD_LIBRARY_PATH
fi
FAILS=0
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    [ -n "${KEEP:-}" ] || rm -rf "$WORK" ${FAKEVERBS_DIR:+"$FAKEVERBS_DIR"}
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
children() { awk -v p="$1" '$4 == p {print $1}' /proc/[0-9]*/stat 2>/dev/null; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
start_server() { # name [env...] -> PORT, SERVER_PID
    local name=$1; shift
    PORT=$(free_port)
    env "$@" "$SERVER" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" --log-level debug \
        >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 100); do
        grep -q "listening on" "$WORK/$name.log" && return 0
        sleep 0.1
    done
    echo "gpu-server did not start:"; cat "$WORK/$name.log"; exit 1
}
export RGPU_SESSION_TIMEOUT_MS=2000
kind=${RGPU_TEST_TRANSPORT:-tcp}

start_server long FAKECUDA_SYNC_SLEEP_MS=6000
if RGPU_SERVER=127.0.0.1:$PORT timeout 60 "$STALL" long >"$WORK/long.out" 2>&1 &&
    grep -q PASS "$WORK/long.out"; then
    ok "$kind: a 6 s call with a 2 s session timeout succeeds ($(head -1 "$WORK/long.out"))"
else
    fail "$kind: a 6 s call with a 2 s session timeout"; cat "$WORK/long.out"
fi
if [ "$kind" = rdma ] && ! grep -q "transport rdma" "$WORK/long.log"; then
    fail "rdma: the session did not move to RDMA"
fi
if grep -q "keepalive every 500 ms while a call runs" "$WORK/long.log"; then
    ok "$kind: the worker kept the session alive every quarter of the client's timeout"
else
    fail "$kind: no keepalive started"; tail -20 "$WORK/long.log"
fi

start_server stop
RGPU_SERVER=127.0.0.1:$PORT "$STALL" stop >"$WORK/stop.out" 2>&1 &
VICTIM=$!
for _ in $(seq 600); do grep -q running "$WORK/stop.out" && break; sleep 0.1; done
sleep 0.5
WORKER=$(children "$SERVER_PID" | head -1)
[ -n "$WORKER" ] || { fail "$kind: no worker to stop"; cat "$WORK/stop.out"; exit 1; }
PIDS+=("$WORKER")
kill -STOP "$WORKER"
if timeout 60 tail --pid="$VICTIM" -f /dev/null && wait "$VICTIM" && grep -q PASS "$WORK/stop.out"; then
    ok "$kind: a stopped worker: $(grep -E '^(first|a later)' "$WORK/stop.out" | tr '\n' ';')"
else
    fail "$kind: a stopped worker left its client waiting"; cat "$WORK/stop.out"
fi
if grep -q "sent nothing for 2000 ms while a call waited (session_timeout" "$WORK/stop.out"; then
    ok "$kind: ... and the client said why"
else
    fail "$kind: the client did not say why"
fi
kill -CONT "$WORKER" 2>/dev/null
exit $((FAILS > 0))
