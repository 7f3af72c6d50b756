#!/bin/bash
# NCCL through rgpu on two GPUs of one host (issue 21): all-reduce bus bandwidth from 1 MiB to
# 1 GiB natively and through rgpu (two ranks, two sessions, one gpu-server), DDP losses with
# torchrun --nproc-per-node 2 against native, and a killed rank (natively and through rgpu): the
# survivor fails, not hangs (PyTorch's own timeout is set to 600 s, so an end within 120 s comes
# from the error: NCCL's remote error through the worker's watchdog, or nccl_timeout = 30 here).
# Usage (GPU host with 2 GPUs, from the bundle): tests/gpu/nccl_two_gpu.sh [BUNDLE]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
PORT=${PORT:-7083}
. "$ROOT/tests/gpu/nccl_lib.sh"
start_server "nccl_timeout = 30"

busbw() { # runner label
    rm -f "$WORK/$2.id"
    "$1" "$B/bin/nccl_busbw" 1 2 "$WORK/$2.id" 1024 20 >/dev/null 2>"$LOGS/busbw.$2.r1.err" &
    local p=$!
    "$1" "$B/bin/nccl_busbw" 0 2 "$WORK/$2.id" 1024 20 >"$LOGS/busbw.$2" 2>"$LOGS/busbw.$2.r0.err"
    local rc=$?
    wait $p || rc=$?
    return $rc
}
if busbw native native && busbw remote rgpu; then
    ok "all-reduce bus bandwidth measured"
    python3 - "$LOGS/busbw.native" "$LOGS/busbw.rgpu" <<'PY'
import json, sys
n, r = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
print("%12s %14s %14s %7s" % ("bytes", "native GB/s", "rgpu GB/s", "ratio"))
for a, b in zip(n, r):
    print("%12d %14.2f %14.2f %7.3f" % (a["bytes"], a["busbw_gbs"], b["busbw_gbs"], b["busbw_gbs"] / a["busbw_gbs"]))
PY
else fail "bus bandwidth"; tail -5 "$LOGS"/busbw.*.err; fi

T=$ROOT/tests/gpu/torch_ddp.py
TR=(python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29531)
native "${TR[@]}" "$T" --json >"$LOGS/ddp2.native" 2>"$LOGS/ddp2.native.err"; rn=$?
remote "${TR[@]}" "$T" --json >"$LOGS/ddp2.rgpu" 2>"$LOGS/ddp2.rgpu.err"; rr=$?
if [ $rn = 0 ] && [ $rr = 0 ] && msg=$(python3 "$T" --compare "$LOGS/ddp2.native" "$LOGS/ddp2.rgpu"); then
    ok "DDP on 2 GPUs (torchrun): $msg"
else fail "DDP on 2 GPUs (native $rn, rgpu $rr) ${msg:-}"; tail -5 "$LOGS"/ddp2.*.err; fi

# The killed rank: two processes started by hand (torchrun would end the survivor itself).
kill_run() { # runner label
    local p rc took start=$(date +%s)
    RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29541 \
        "$1" python3 "$T" --kill-rank 1 --kill-step 5 --timeout 600 >"$LOGS/kill.$2.r1" 2>&1 &
    p=$!
    RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29541 \
        "$1" timeout 300 python3 "$T" --kill-rank 1 --kill-step 5 --timeout 600 \
        >"$LOGS/kill.$2.r0" 2>&1
    rc=$?
    wait $p
    took=$(( $(date +%s) - start ))
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 120 ]; then
        ok "$2: a killed rank ends the survivor with an error in ${took}s (status $rc), not a hang"
    else fail "$2: a killed rank: survivor status $rc after ${took}s"; tail -20 "$LOGS/kill.$2.r0"; fi
}
kill_run native native
kill_run remote rgpu
grep -q "aborting it" "$LOGS/server.log" && ok "the worker aborted the survivor's communicator" \
    || fail "no abort in the server log"
echo "$FAILS failure(s)"
exit "$FAILS"
