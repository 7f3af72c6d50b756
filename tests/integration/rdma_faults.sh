#!/bin/bash
# RDMA end to end on tests/fakeverbs: how the transport is chosen, and the faults the issue
# names (remote access error, queue pair in the error state, a receiver without a posted
# buffer, a link cut / peer gone, slow completions). Each fault must end its own session with a
# clear error, quickly, and leave the server serving others.
# Usage: rdma_faults.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/rdma_lib.sh"
PROGS=$BUILD/tests/programs

# expect_fault NAME SERVER_ENV CLIENT_ENV MESSAGE: the program fails within 30 s with MESSAGE on
# its stderr; the server still serves a clean session afterwards.
expect_fault() {
    local name=$1 senv=$2 cenv=$3 msg=$4 start
    start_server "$name" $senv -- || { fail "$name: server did not start"; return; }
    start=$SECONDS
    if env $cenv RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 30 \
        "$PROGS/copies_static" 64 >"$WORK/$name.out" 2>"$WORK/$name.err"; then
        fail "$name: the program succeeded"
    elif [ $? -eq 124 ]; then
        fail "$name: hung (timeout)"
    elif ! grep -q "$msg" "$WORK/$name.err"; then
        fail "$name: no '$msg' in the error"; tail -5 "$WORK/$name.err"
    elif ! RGPU_TRANSPORT=tcp RGPU_SERVER=127.0.0.1:$PORT timeout 30 "$PROGS/vadd_static" |
        grep -q PASS || ! kill -0 "$SERVER_PID"; then
        fail "$name: the server did not go on serving"; tail -5 "$WORK/$name.log"
    else
        ok "$name: failed in $((SECONDS - start)) s with: $(grep -m1 "$msg" "$WORK/$name.err" | cut -d' ' -f3- | cut -c1-150)"
    fi
    kill "$SERVER_PID"
}

expect_fault "remote access error" FAKEVERBS_REMOTE_ACCESS_ERROR=5 "" "remote access error"
expect_fault "queue pair error (failed post)" "" FAKEVERBS_FAIL_POST=7 "posting a send failed"
expect_fault "receiver without a posted buffer" FAKEVERBS_LOSE_RECV=40 "" "RNR retry counter exceeded"
expect_fault "link cut (peer gone)" "" FAKEVERBS_DROP_AFTER=30 "lost the gpu-server"

# A remote access error on a one-sided bulk READ or WRITE (the client's NIC refuses the worker's
# READ or WRITE of its pinned memory), through the worker's staging buffers or straight to
# device memory (GPUDirect RDMA): that session ends with a log line naming the operation, a
# concurrent RDMA session passes, and the server serves the next one.
bulk_fault() { # OP (READ | WRITE) PATH (staging | direct)
    local op=$1 path=$2 took direct=", direct to device memory"
    [ "$path" = direct ] || direct=""
    [ "$path" = direct ] && start_server "bulk$op" -- || start_server "bulk$op" FAKECUDA_DMABUF=0 --
    RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT "$BUILD/tests/integration/hold_memory" 16 3 \
        >"$WORK/bystander.out" 2>&1 &
    BY=$!
    PIDS+=("$BY")
    for _ in $(seq 100); do grep -q ready "$WORK/bystander.out" && break; sleep 0.1; done
    start=$SECONDS
    if env "FAKEVERBS_${op}_ACCESS_ERROR=2" RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 30 \
        "$BUILD/tests/integration/pinned_copies" >"$WORK/bulk$op.out" 2>"$WORK/bulk$op.err"; then
        fail "bulk $op ($path) refused: the program succeeded"
    elif [ $? -eq 124 ] || ! took=$((SECONDS - start)); then
        fail "bulk $op ($path) refused: hung (timeout)"
    elif ! grep -q "lost the gpu-server" "$WORK/bulk$op.err" ||
        ! grep -q "RDMA $op of the client's memory [^)]*key [0-9a-fx]*$direct) failed" "$WORK/bulk$op.log" ||
        ! grep -q "remote access error" "$WORK/bulk$op.log"; then
        fail "bulk $op ($path) refused: no clear error"; tail -3 "$WORK/bulk$op.err" "$WORK/bulk$op.log"
    elif ! wait "$BY" || ! grep -q PASS "$WORK/bystander.out" ||
        ! RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 30 "$PROGS/vadd_static" | grep -q PASS; then
        fail "bulk $op ($path) refused: other sessions were affected"; cat "$WORK/bystander.out"
    else
        ok "remote access error on a bulk $op ($path): that session ended in $took s ($(grep -m1 -o "RDMA $op of the client's memory.*" "$WORK/bulk$op.log" | cut -c1-150)), the others passed"
    fi
    kill "$SERVER_PID"
}
bulk_fault READ staging
bulk_fault WRITE staging
bulk_fault READ direct
bulk_fault WRITE direct

# Slow completions: everything still works, only later.
start_server slow FAKEVERBS_DELAY_US=300 --
if RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 60 "$PROGS/vadd_static" | grep -q PASS; then
    ok "delayed completions (300 us per packet): vadd passes"
else
    fail "delayed completions"
fi
kill "$SERVER_PID"

# A client that dies on RDMA: its worker notices, frees its memory and exits.
start_server main --
RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT "$BUILD/tests/integration/hold_memory" 64 >"$WORK/hold.out" 2>&1 &
HOLD=$!
PIDS+=("$HOLD")
for _ in $(seq 100); do grep -q ready "$WORK/hold.out" && break; sleep 0.1; done
kill -9 "$HOLD"; wait "$HOLD" 2>/dev/null
for _ in $(seq 50); do grep -q "freed 1 allocation" "$WORK/main.log" && break; sleep 0.1; done
if grep -q "transport rdma" "$WORK/main.log" && grep -q "freed 1 allocation" "$WORK/main.log"; then
    ok "dead client on rdma: worker ended and freed its memory"
else
    fail "dead client on rdma"; tail -5 "$WORK/main.log"
fi

# Choice of transport: auto without a device here stays on tcp and says why in one line;
# rdma without a device is a clear error; a tcp client on a rdma-only server is refused.
if (unset FAKEVERBS_DIR; RGPU_LOG_LEVEL=info RGPU_TRANSPORT=auto RGPU_SERVER=127.0.0.1:$PORT \
    timeout 30 "$PROGS/vadd_static" >"$WORK/auto.out" 2>"$WORK/auto.err") &&
    [ "$(grep -c "transport: tcp to 127.0.0.1:$PORT (auto: no RDMA device here)" "$WORK/auto.err")" = 1 ]; then
    ok "auto without a device: tcp, one line: $(grep -m1 'transport:' "$WORK/auto.err" | cut -d' ' -f3-)"
else
    fail "auto without a device"; cat "$WORK/auto.err"
fi
if RGPU_LOG_LEVEL=info RGPU_TRANSPORT=auto RGPU_SERVER=127.0.0.1:$PORT timeout 30 \
    "$PROGS/vadd_static" 2>"$WORK/auto2.err" | grep -q PASS && grep -q "transport: rdma to" "$WORK/auto2.err"; then
    ok "auto with a device: $(grep -m1 'transport:' "$WORK/auto2.err" | cut -d' ' -f3-)"
else
    fail "auto with a device"; cat "$WORK/auto2.err"
fi
# An offer the client cannot take (its fake fabric does not reach the server's): auto goes on
# over TCP, both sides say so.
if FAKEVERBS_DIR=$WORK RGPU_LOG_LEVEL=info RGPU_TRANSPORT=auto RGPU_SERVER=127.0.0.1:$PORT \
    timeout 30 "$PROGS/vadd_static" 2>"$WORK/unreach.err" | grep -q PASS &&
    grep -q "transport: tcp to 127.0.0.1:$PORT (auto: RDMA connect to .* failed" "$WORK/unreach.err" &&
    grep -q "transport tcp (the client stayed on TCP" "$WORK/main.log"; then
    ok "auto, RDMA offered but unreachable: $(grep -m1 'transport: tcp' "$WORK/unreach.err" | cut -d' ' -f3-)"
else
    fail "auto, RDMA offered but unreachable"; cat "$WORK/unreach.err"; grep transport "$WORK/main.log"
fi
if (unset FAKEVERBS_DIR; RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 30 \
    "$PROGS/vadd_static" >/dev/null 2>"$WORK/nodev.err"); then
    fail "rdma without a device: the program succeeded"
elif grep -q "transport = rdma, but this host cannot use RDMA: no RDMA device" "$WORK/nodev.err"; then
    ok "rdma without a device: clear error"
else
    fail "rdma without a device"; cat "$WORK/nodev.err"
fi
kill "$SERVER_PID"
start_server required -- --transport rdma
if RGPU_TRANSPORT=tcp RGPU_SERVER=127.0.0.1:$PORT timeout 30 "$PROGS/vadd_static" >/dev/null 2>"$WORK/req.err"; then
    fail "tcp client on a rdma-only server: succeeded"
elif grep -q "requires RDMA" "$WORK/req.err" &&
    RGPU_TRANSPORT=rdma RGPU_SERVER=127.0.0.1:$PORT timeout 30 "$PROGS/vadd_static" | grep -q PASS; then
    ok "rdma-only server: tcp client refused ($(grep -m1 -o 'requires RDMA[^;]*' "$WORK/req.err")), rdma client served"
else
    fail "rdma-only server"; cat "$WORK/req.err"
fi
kill "$SERVER_PID"
if (unset FAKEVERBS_DIR; start_server nodev -- --transport rdma); then
    fail "rdma-only server without a device started"
elif grep -q "transport = rdma but this host cannot use RDMA" "$WORK/nodev.log"; then
    ok "rdma-only server without a device: refuses to start with a clear error"
else
    fail "rdma-only server without a device"; cat "$WORK/nodev.log"
fi

echo "$FAILS failure(s)"
[ "$FAILS" -eq 0 ]
