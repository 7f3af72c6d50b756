#!/bin/bash
# GPUDirect RDMA end to end on tests/fakeverbs and tests/fakecuda (whose dmabuf is a memfd
# aliasing the fake device allocation): one-sided copies go straight to and from device memory
# and land where CUDA puts them (direct_copies checks each through another path, including an
# allocation freed and allocated again at the same address); the worker counts every byte as
# direct and none through staging; each reason to fall back to staging is named in one line and
# the copies still pass. The fault case (a remote access error on a direct READ or WRITE ends
# only that session) is in rdma_faults.sh.
# Usage: rdma_direct.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/rdma_lib.sh"
export RGPU_TRANSPORT=rdma
TOOLS=$BUILD/tests/integration

# run NAME PROGRAM: run it against the server; PASS expected. Its output in $WORK/NAME.out.
run() {
    RGPU_SERVER=127.0.0.1:$PORT timeout 120 "$2" >"$WORK/$1.out" 2>&1 && grep -q '^PASS' "$WORK/$1.out"
}

# The session id of program PROG in log LOG.
sid() { sed -n "s/.*session \([0-9]*\): client $1 .*/\1/p" "$2" | head -1; }

# The numbers of a "N HtoD (B bytes...), M DtoH (C bytes..." text, as "N B M C".
numbers() { sed -E 's/^[^0-9]*([0-9]+) HtoD \(([0-9]+) bytes[^,]*, ([0-9]+) DtoH \(([0-9]+) bytes.*/\1 \2 \3 \4/; s/^([0-9]+) HtoD \(([0-9]+) bytes\) and ([0-9]+) DtoH \(([0-9]+) bytes.*/\1 \2 \3 \4/'; }

# ---- direct: data, the worker's count, no staging ------------------------------------------
start_server direct -- || fail "direct: server did not start"
if ! run direct_copies "$TOOLS/direct_copies"; then
    fail "direct: direct_copies"; grep FAIL "$WORK/direct_copies.out" | head -5
elif ! grep -q "same address: yes" "$WORK/direct_copies.out"; then
    fail "direct: the freed allocation's address never came back: $(grep 'same address' "$WORK/direct_copies.out")"
else
    ok "direct: direct_copies passed (an allocation freed and allocated again at the same address included)"
fi
run pinned_copies "$TOOLS/pinned_copies" || { fail "direct: pinned_copies"; grep FAIL "$WORK/pinned_copies.out" | head -5; }
sleep 0.5
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null
log=$WORK/direct.log
n=$(grep -c "one-sided copies go straight to and from device memory (GPUDirect RDMA" "$log")
[ "$n" = 2 ] && ok "direct: one line per session says so" || { fail "direct: $n 'straight to device memory' lines for 2 sessions"; grep "one-sided copies go" "$log"; }
# all_direct PROGRAM EXPECT: the program's session moved by GPUDirect RDMA what the program's
# "EXPECT: ..." line counts, and nothing through staging.
all_direct() {
    local s want got
    s=$(sid "$1" "$log")
    want=$(sed -n "s/^$2: //p" "$WORK/$1.out" | numbers)
    got=$(sed -n "s/.*session $s: GPUDirect RDMA: //p" "$log" | numbers)
    if [ -n "$want" ] && [ "$got" = "$want" ] && grep -q "session $s: GPUDirect RDMA: .* 0 bytes through staging" "$log"; then
        ok "direct: $1 moved by GPUDirect RDMA, none through staging: $got"
    else
        fail "direct: GPUDirect count of session $s '$got', expected '$want'"; grep "GPUDirect\|one-sided" "$log"
    fi
}
all_direct direct_copies "expect direct"
all_direct pinned_copies "expect one-sided"
if grep -q "error\|freed [1-9][0-9]* allocation" "$log"; then
    fail "direct: errors or leaked allocations in the worker's log"; grep "error\|freed" "$log" | head -5
fi

# ---- fallbacks: staging, one line naming why, data still right ------------------------------
printf '[server]\nrdma_direct = off\n' >"$WORK/off.conf"
fallback() { # NAME REASON [ENV=VALUE...] -- [server flags]
    local name=$1 reason=$2; shift 2
    start_server "$name" "$@" || { fail "$name: server did not start"; return; }
    if ! run "$name" "$TOOLS/direct_copies"; then
        fail "$name: direct_copies"; grep FAIL "$WORK/$name.out" | head -5
    else
        sleep 0.5
        local want got line s
        s=$(sid direct_copies "$WORK/$name.log")
        want=$(sed -n 's/^expect direct: //p' "$WORK/$name.out" | numbers)
        got=$(sed -n "s/.*session $s: one-sided copies: //p" "$WORK/$name.log" | numbers)
        line=$(grep "one-sided copies go" "$WORK/$name.log")
        if [ "$(grep -c "one-sided copies go through host staging (no GPUDirect RDMA: $reason" "$WORK/$name.log")" != 1 ] ||
            grep -q "GPUDirect RDMA: [0-9]" "$WORK/$name.log"; then
            fail "$name: expected one staging line naming '$reason'"; grep "one-sided\|GPUDirect" "$WORK/$name.log"
        elif [ -z "$want" ] || [ "$got" != "$want" ]; then
            fail "$name: one-sided count '$got', expected '$want'"
        else
            ok "$name: staging, one-sided $got; ${line#*session $s: }"
        fi
    fi
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null
}
fallback "device without dmabuf" "GPU 0 cannot export device memory as a dmabuf" FAKECUDA_DMABUF=0 --
fallback "NIC without dmabuf" "ibv_reg_dmabuf_mr of [0-9]* bytes of device memory failed: Operation not supported" FAKEVERBS_NO_DMABUF=1 --
fallback "switched off by environment" "RGPU_RDMA_DIRECT=0" RGPU_RDMA_DIRECT=0 --
fallback "switched off in the config" "rdma_direct = off in the config" -- --config "$WORK/off.conf"

echo "$FAILS failure(s)"
[ "$FAILS" -eq 0 ]
