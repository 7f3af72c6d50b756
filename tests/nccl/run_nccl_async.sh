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
#   - XLA's collective-permute over 2 and 4 devices of one process (communicators made in one
#     group, then a thread per device, each its own group of a send and a receive): the fake
#     NCCL connects point-to-point pairs lazily, at a group's end, waiting for the peer's own
#     connect, as NCCL does; the peer's group sits behind in the session, so the first exchange
#     hung until the worker connected the pairs at creation (issue 29). With
#     `nccl_connect_pairs = no` it must still hang (the fake's model is what the check rests on),
#     and natively (the fake NCCL and driver without rgpu: per-thread groups) it must not.
#   - the memory NCCL takes for those pairs (FAKENCCL_P2P_BYTES) charged to the quota, in both
#     forms of creation: over the quota the worker aborts the communicator, and the session's
#     other ranks of it, and the first exchange fails at once; with room, the worker's debug log
#     shows the charge.
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
start_server() { # config port log
    FAKECUDA_DEVICES=4 FAKENCCL_ASYNC=1 FAKENCCL_BLIND=1 \
        "$SERVER" --config "$1" --listen 127.0.0.1 --port "$2" --driver "$FAKE" \
        --log-level "${LOG_LEVEL:-info}" >"$3" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do grep -q "listening on" "$3" 2>/dev/null && break; sleep 0.1; done
}
start_server "$WORK/server.conf" "$PORT" "$WORK/s.log"

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

# The clique made in one group (XLA until 2024), by a blocking init per creation thread (XLA's
# NcclCollectives now: a thread pool), or split so from communicators made so (XLA's
# SplitCommunicators; parents and children each get their pairs). SEEN: how many 4-rank
# communicators have had their pairs connected once the mode ran.
for how in ppermute:1 ppermute-threads:2 ppermute-split:4; do
    seen=${how#*:} how=${how%:*}
    for n in 2 4; do
        as a ta timeout 60 "$RANKS" $how 0 "$n" x >"$WORK/$how$n.out" 2>&1
        RC=$?
        check "collective-permute over $n devices of one process, a group per device thread, $how (exit $RC)" \
            [ $RC = 0 ]
        [ $RC = 0 ] || sed 's/^/    /' "$WORK/$how$n.out"
    done
    check "... the worker connected the pairs of the 4 ranks at creation" \
        [ "$(grep -c "connected 12 point-to-point pairs of 4 ranks" "$WORK/s.log")" = "$seen" ]
done
for how in group threads split; do
    FAKECUDA_DEVICES=4 FAKENCCL_ASYNC=1 timeout 30 "$BUILD/tests/nccl/nccl_ppermute_native" 4 $how \
        >"$WORK/native.out" 2>&1
    RC=$?
    check "the same natively (the fake NCCL without rgpu, per-thread groups), made in $how, connects (exit $RC)" \
        [ $RC = 0 ]
    [ $RC = 0 ] || sed 's/^/    /' "$WORK/native.out"
done
# Without the connection at creation the first exchange hangs (the client is ended after 8 s;
# its worker aborts the communicators when it sees the client gone).
printf 'nccl_connect_pairs = no\n' | sed '/^nccl_secret/r /dev/stdin' "$WORK/server.conf" \
    >"$WORK/off.conf"
POFF=$(free_port)
start_server "$WORK/off.conf" "$POFF" "$WORK/off.log"
PORT=$POFF as a ta timeout 8 "$RANKS" ppermute 0 2 x >"$WORK/ppermute-off.out" 2>&1
RC=$?
check "with nccl_connect_pairs = no the first exchange still hangs, as NCCL's lazy connection makes it (exit $RC)" \
    [ $RC = 124 ]

# The memory NCCL takes for the pairs connected at creation is charged to the quota: the fake
# NCCL allocates FAKENCCL_P2P_BYTES (1 MiB) per side of a connection, 4 MiB for 2 ranks (and
# 1 MiB per communicator at creation). The fake driver has one primary context and one pool of
# memory for all its devices, so a rank's measure sees every rank's allocations: in a group the
# worker charges the group's 2 + 4 MiB once, as the communicators' creation; on creation
# threads 1 to 2 MiB per rank at creation (the ranks' allocations fall within each other's
# measure), then each rank the pairs' 4 MiB. Tenant tight's 5 MiB holds the creation but not
# the pairs on top: the worker aborts the communicator over the quota and the session's other
# ranks of it (alone, they waited for it until nccl_timeout, 600 s), whose threads' first
# exchange fails (the client is ended after 30 s: a wait until nccl_timeout fails the check).
# Tenant roomy's quota holds it all: the worker's debug log shows the charge.
cat >"$WORK/p2p.conf" <<CONF
[server]
nccl_library = $BUILD/tests/fakenccl/libfakenccl.so
nccl_secret = ci-secret
[tenant tight]
token = tt
mem_quota = 5MiB
[tenant roomy]
token = tr
mem_quota = 1GiB
CONF
PP2P=$(free_port)
FAKENCCL_P2P_BYTES=1048576 LOG_LEVEL=debug start_server "$WORK/p2p.conf" "$PP2P" "$WORK/p2p.log"
for how in ppermute ppermute-threads; do
    [ $how = ppermute ] && what="its creation in a group" || what="its point-to-point pairs"
    PORT=$PP2P as tight tt timeout 30 "$RANKS" $how 0 2 x >"$WORK/$how-tight.out" 2>&1
    RC=$?
    check "$how: with the pairs' memory over the quota the first exchange fails, neither hangs nor passes (exit $RC)" \
        eval '[ $RC != 0 ] && [ $RC != 124 ] && grep -q "a call failed" "$WORK/$how-tight.out"'
    check "... the worker charged the pairs' memory ($what) and aborted a communicator over the quota" \
        grep -q "bytes of device memory more ($what), over the quota; aborting it" "$WORK/p2p.log"
    PORT=$PP2P as roomy tr timeout 30 "$RANKS" $how 0 2 x >"$WORK/$how-roomy.out" 2>&1
    RC=$?
    check "$how: with room for it the exchange passes (exit $RC)" [ $RC = 0 ]
done
check "... and the charge is logged: the group's creation and pairs, 6 MiB; each rank's pairs, 4 MiB" \
    eval '[ "$(grep -c "took 6291456 bytes more (its creation in a group)" "$WORK/p2p.log")" = 1 ] &&
        [ "$(grep -c "took 4194304 bytes more (its point-to-point pairs)" "$WORK/p2p.log")" = 2 ]'

[ "$FAILS" = 0 ] || { echo "--- server"; tail -30 "$WORK/s.log"; echo "--- quota server"; tail -20 "$WORK/p2p.log"; }
exit "$FAILS"
