#!/bin/bash
# NCCL through rgpu with collectives that run asynchronously, as a real NCCL's kernels do
# (FAKENCCL_ASYNC=1: the call enqueues on the communicator's "device"; the fake driver's stream,
# event and context synchronization wait for it) and an NCCL that does not see dead peers
# (FAKENCCL_BLIND=1, as across NVLink), nccl_timeout 600 s. Checks, each bounded by `timeout`:
#   - one process driving two devices of a server, a thread per device as XLA does (each its
#     own group of one all-reduce, then a wait for its device), device 0's wait sent before
#     device 1's collective: the wait must not hold the session or the worker (it hung before);
#   - a rank that dies between all-reduces while the other waits in cuCtxSynchronize for a
#     collective that needs it: the survivor must fail through rgpu's liveness files, not hang
#     (the watchdog's event had lapsed before the last collective: it hung before).
# Usage: run_nccl_async.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
RANKS=$BUILD/tests/nccl/nccl_ranks
export LD_LIBRARY_PATH=$BUILD/lib FAKENCCL_DRIVER=$FAKE

cat >"$WORK/server.conf" <<CONF
[server]
nccl_library = $BUILD/tests/fakenccl/libfakenccl.so
nccl_timeout = 600
nccl_secret = ci-secret
[tenant a]
token = ta
CONF
PORT=$(free_port)
FAKECUDA_DEVICES=2 FAKENCCL_ASYNC=1 FAKENCCL_BLIND=1 \
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    --log-level info >"$WORK/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do grep -q "listening on" "$WORK/s.log" 2>/dev/null && break; sleep 0.1; done

as a ta timeout 60 "$RANKS" devwait 0 1 x >"$WORK/devwait.out" 2>&1
RC=$?
check "a thread per device: a device's wait before the peer's collective is sent does not hang (exit $RC)" \
    [ $RC = 0 ]
[ $RC = 0 ] || sed 's/^/    /' "$WORK/devwait.out"

rm -f "$WORK/kl.id"
as a ta timeout 60 "$RANKS" killloop 0 2 "$WORK/kl.id" >"$WORK/kl.0.out" 2>&1 &
K0=$!
as a ta "$RANKS" killloop 1 2 "$WORK/kl.id" >"$WORK/kl.1.out" 2>&1 &
K1=$!
RC=0
wait "$K0" || RC=$?
wait "$K1" 2>/dev/null
check "a rank dead between all-reduces: the survivor blocked in cuCtxSynchronize fails, not hangs (exit $RC)" \
    [ $RC = 0 ]
[ $RC = 0 ] || sed 's/^/    /' "$WORK/kl.0.out"
check "the survivor's worker saw its peer's worker gone" \
    grep -q "a peer rank's worker on this host is gone" "$WORK/s.log"

[ "$FAILS" = 0 ] || { echo "--- server"; tail -30 "$WORK/s.log"; }
exit "$FAILS"
