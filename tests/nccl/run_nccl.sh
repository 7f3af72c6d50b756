#!/bin/bash
# NCCL through rgpu without GPUs: three gpu-servers on the fake driver whose workers load the fake
# NCCL (tests/fakenccl), which really combines the ranks' buffers across the worker processes.
# Each rank is its own client process (tests/nccl/nccl_ranks, linking the shim and the client)
# served by its own server (three of them). Checks: every collective and grouped send/recv with right values,
# split, PreMulSum, NCCL memory; a rank that dies makes the other's collective fail (remote
# error, the watchdog aborts) and its worker aborts its communicator; a rank that hangs fails
# the other after nccl_timeout; another tenant cannot join with a tenant's id, nor anyone with
# a forged one; a communicator's device memory counts against the quota.
# Usage: run_nccl.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
RANKS=$BUILD/tests/nccl/nccl_ranks
export LD_LIBRARY_PATH=$BUILD/lib FAKENCCL_DRIVER=$FAKE FAKENCCL_VERSION=22877 NCCL_RANKS_VERSION=22877

cat >"$WORK/server.conf" <<CONF
[server]
nccl_library = $BUILD/tests/fakenccl/libfakenccl.so
nccl_timeout = 3
nccl_secret = ci-secret
[tenant a]
token = ta
[tenant b]
token = tb
[tenant q]
token = tq
mem_quota = 4MiB
CONF
start_server() { # port log [metrics options]
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$1" --driver "$FAKE" \
        --log-level info "${@:3}" >"$2" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do grep -q "listening on" "$2" 2>/dev/null && return 0; sleep 0.1; done
    echo "server on port $1 did not start:"; cat "$2"; exit 1
}
# One server per rank: ranks of one job sit on different GPUs (NCCL refuses two on one), and
# the fake driver has one GPU, whose compute gate would hold one rank's collective behind the
# other's, which waits for it (docs/nccl.md, "Compute gate").
P1=$(free_port)
P2=$(free_port)
P3=$(free_port)
MPORT=$(free_port)
start_server "$P1" "$WORK/s1.log" --metrics-listen "127.0.0.1:$MPORT"
start_server "$P2" "$WORK/s2.log"
start_server "$P3" "$WORK/s3.log"
PORTS=("$P1" "$P2" "$P3")
on() { # port tenant token args...
    local p=$1 t=$2 k=$3; shift 3
    ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$p RGPU_TENANT=$t RGPU_TOKEN=$k "$@"
}
pair() { # name mode nranks: rank r on server r + 1 (PAIR_PORTS: the servers instead)
    local name=$1 mode=$2 n=$3 pids=() ports=(${PAIR_PORTS:-${PORTS[@]}})
    rm -f "$WORK/$name".id*
    for r in $(seq 0 $((n - 1))); do
        NCCL_RANKS_IDFILE2=$WORK/$name.id2 NCCL_RANKS_IDFILE3=$WORK/$name.id3 \
            on "${ports[$r]}" a ta timeout 60 "$RANKS" "$mode" "$r" "$n" "$WORK/$name.id" \
            >"$WORK/$name.$r.out" 2>&1 &
        pids+=($!)
    done
    RC0=0
    wait "${pids[0]}" || RC0=$?
    [ "$mode" = hang ] && kill "${pids[@]:1}" 2>/dev/null # they sleep; rank 0 is the check
    for p in "${pids[@]:1}"; do wait "$p" || [ "$mode" = hang ] || RC0=$((RC0 + 100)); done
}
show() { for f in "$WORK"/$1.*.out; do sed "s|^|    $(basename "$f"): |" "$f"; done; }
checkrun() { # description name: rank 0's status RC0 is 0, else show the ranks' output
    if [ "$RC0" = 0 ]; then ok "$1"; else fail "$1"; show "$2"; fi
}

pair all all 2
checkrun "two ranks on two servers: every collective, send/recv, split, PreMulSum, ncclMemAlloc" all
# Rank 0 of `all` made 11 collective calls and no kernel launch: the gate counted them.
LAUNCHES=$(python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$MPORT/metrics" | awk '/^rgpu_tenant_launches_total\{tenant="a"\}/{print $2}')
check "collectives pass the compute gate (launches counted: ${LAUNCHES:-none})" \
    [ "${LAUNCHES:-0}" -ge 11 ]
pair all3 all 3
checkrun "three ranks on three servers" all3
pair more more 2
checkrun "NCCL 2.28's further calls: windows, simulated group, shrink, revoke, teams, scalable non-blocking init" more
check "a forged window handle was logged" grep -q "window handle it did not give was refused" "$WORK/s1.log"

# A server of two devices whose NCCL does not see dead peers (as across NVLink) and allocates
# later (FAKENCCL_LAZY_BYTES), with the default nccl_timeout (600 s): only rgpu's own detection
# can end a rank whose peer died.
sed 's/^nccl_timeout = .*/nccl_timeout = 600/' "$WORK/server.conf" >"$WORK/blind.conf"
P6=$(free_port)
FAKECUDA_DEVICES=2 FAKENCCL_BLIND=1 FAKENCCL_LAZY_BYTES=2097152 \
    "$SERVER" --config "$WORK/blind.conf" --listen 127.0.0.1 --port "$P6" --driver "$FAKE" \
    --log-level info >"$WORK/s6.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do grep -q "listening on" "$WORK/s6.log" 2>/dev/null && break; sleep 0.1; done

on "$P6" a ta timeout 60 "$RANKS" devices 0 1 x >"$WORK/devices.0.out" 2>&1
check "two devices in one process: a blocking init per thread, grouped collectives, ncclCommInitAll" [ $? = 0 ]
grep -q FAILED "$WORK/devices.0.out" && show devices
check "a session on two devices connects its communicators at creation" \
    grep -q "NCCL_RUNTIME_CONNECT=0" "$WORK/s6.log"
on "$P6" a ta timeout 60 "$RANKS" cupy 0 1 x >"$WORK/cupy.0.out" 2>&1
check "two devices in one process in CuPy's order: ncclCommInitAll first, then an init per thread" [ $? = 0 ]
grep -q FAILED "$WORK/cupy.0.out" && show cupy
# The same two devices on two servers, one each (one process using two GPU hosts, as
# DataParallel and XLA reach them): a group is opened and ended on every worker it uses.
on "$P1,127.0.0.1:$P2" a ta timeout 60 "$RANKS" devices 0 1 x >"$WORK/devices2.0.out" 2>&1
check "two devices of one process on two servers: inits per thread, grouped collectives, ncclCommInitAll" [ $? = 0 ]
grep -q FAILED "$WORK/devices2.0.out" && show devices2
# XLA's thread per device on those two servers: device 0's ncclCommGetAsyncError waits for its
# worker, inside a group end that waits for device 1's collective, which its thread sends
# 300 ms later (JAX's pmap over two GPU hosts hung here: the shim held its order lock across
# the wait for the reply).
on "$P1,127.0.0.1:$P2" a ta timeout 30 "$RANKS" devwait 0 1 x >"$WORK/devwait2.0.out" 2>&1
RC0=$?
checkrun "two devices of one process on two servers, a thread per device as XLA's (exit $RC0)" devwait2

# Rank 1 killed inside an all-reduce: its worker sees the client gone and aborts; rank 0's
# worker sees rank 1's liveness file unlocked while its own all-reduce waits, and aborts.
rm -f "$WORK/killmid".* "$WORK/dead"
NCCL_RANKS_DEAD=$WORK/dead on "$P6" a ta timeout 90 "$RANKS" killmid 0 2 "$WORK/killmid.id" \
    >"$WORK/killmid.0.out" 2>&1 &
K0=$!
ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$P6 RGPU_TENANT=a RGPU_TOKEN=ta \
    "$RANKS" killmid 1 2 "$WORK/killmid.id" >"$WORK/killmid.1.out" 2>&1 & # $!: the rank itself
K1=$!
wait_for "$WORK/killmid.1.out" "in the all-reduce" && sleep 0.5
kill -9 "$K1" 2>/dev/null
wait "$K1" 2>/dev/null
check "rank 1's worker aborted when its client went" wait_for "$WORK/s6.log" "the client is gone; aborting"
touch "$WORK/dead"
RC0=0
wait "$K0" || RC0=$?
checkrun "a rank killed inside an all-reduce ends the other's next one with ncclRemoteError (nccl_timeout 600 s)" killmid
check "rank 0's worker saw its peer's worker gone" grep -q "a peer rank's worker on this host is gone" "$WORK/s6.log"

on "$P6" q tq "$RANKS" lazy 0 1 0 >"$WORK/lazy_ok.0.out" 2>&1
check "NCCL memory allocated after creation fits the quota (control)" [ $? = 0 ]
grep -q FAILED "$WORK/lazy_ok.0.out" && show lazy_ok
NCCL_RANKS_EXPECT_OVER=1 on "$P6" q tq "$RANKS" lazy 0 1 1048576 >"$WORK/lazy.0.out" 2>&1
check "NCCL memory allocated after creation is charged: over the quota the communicator fails" [ $? = 0 ]
grep -q FAILED "$WORK/lazy.0.out" && show lazy
check "the later growth over the quota was logged" grep -q "more (a first collective of its size), over the" "$WORK/s6.log"

# An NCCL before 2.28 on the GPU host: the calls it lacks answer ncclInvalidUsage.
sed "s|^nccl_library = .*|nccl_library = $BUILD/tests/fakenccl/libfakenccl_old.so|" \
    "$WORK/server.conf" >"$WORK/old.conf"
P7=$(free_port)
"$SERVER" --config "$WORK/old.conf" --listen 127.0.0.1 --port "$P7" --driver "$FAKE" \
    --log-level info >"$WORK/s7.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do grep -q "listening on" "$WORK/s7.log" 2>/dev/null && break; sleep 0.1; done
on "$P7" a ta timeout 60 "$RANKS" old 0 1 x >"$WORK/old.0.out" 2>&1
check "an NCCL before 2.28: AlltoAll, Gather, windows, shrink, simulate answer ncclInvalidUsage" [ $? = 0 ]
grep -q FAILED "$WORK/old.0.out" && show old

pair die die 2
checkrun "a dead rank makes the other's all-reduce fail with ncclRemoteError, not hang" die
check "the survivor's worker logged the abort" grep -q "failed (NCCL error 6" "$WORK/s1.log"
check "the dead rank's worker aborted its communicator at session end" \
    wait_for "$WORK/s2.log" "aborted 1 communicator"

pair hang hang 2
checkrun "a rank that never calls fails the other after nccl_timeout" hang
check "the timeout was logged" grep -q "nccl_timeout); aborting it" "$WORK/s1.log"
NCCL_RANKS_GROUPED=1 pair hangg hang 2
checkrun "a rank that never calls fails the other's grouped send/recv after nccl_timeout" hangg
check "the stuck group end was logged" grep -q "ncclGroupEnd has not returned" "$WORK/s1.log"

rm -f "$WORK/join.id"
on "$P1" a ta "$RANKS" join 0 2 "$WORK/join.id" >"$WORK/join.0.out" 2>&1
on "$P2" b tb "$RANKS" join 1 2 "$WORK/join.id" >"$WORK/join.1.out" 2>&1
check "tenant b cannot join tenant a's communicator" [ $? = 0 ]
check "the refusal names the tenant" grep -q "not made for tenant 'b' was refused" "$WORK/s2.log"
on "$P1" a ta "$RANKS" forge 0 1 x >"$WORK/forge.0.out" 2>&1
check "a forged unique id is refused" [ $? = 0 ]

on "$P1" a ta "$RANKS" single 0 1 x >"$WORK/single.0.out" 2>&1
check "ncclCommInitAll; an application's config reaches the worker's NCCL" [ $? = 0 ]
[ -s "$WORK/single.0.out" ] && grep -q FAILED "$WORK/single.0.out" && show single
on "$P1" q tq "$RANKS" quota 0 1 3670016 >"$WORK/quota.0.out" 2>&1
check "a communicator over the quota fails" [ $? = 0 ]
check "the quota refusal was logged" grep -q "over the quota" "$WORK/s1.log"
on "$P1" q tq "$RANKS" quota 0 1 1048576 >"$WORK/quota_ok.0.out" 2>&1
check "the same communicator under the quota succeeds (the check is not always failing)" \
    [ $? = 1 ]

# The real NCCL, where the toolkit has one: the worker binds every entry point it needs, and
# its unique id leaves the last 32 bytes to the MAC (ncclGetUniqueId needs no GPU).
REAL=${CUDA_HOME:-/usr/local/cuda}/lib64/libnccl.so.2
if [ -f "$REAL" ]; then
    sed "s|^nccl_library = .*|nccl_library = $REAL|" "$WORK/server.conf" >"$WORK/real.conf"
    P4=$(free_port)
    "$SERVER" --config "$WORK/real.conf" --listen 127.0.0.1 --port "$P4" --driver "$FAKE" \
        --log-level info >"$WORK/s4.log" 2>&1 &
    PIDS+=($!)
    sleep 1
    V=$(python3 -c 'import re,sys; t=open(sys.argv[1]).read(); m=[int(re.search(r"NCCL_%s\s+(\d+)" % k, t).group(1)) for k in ("MAJOR","MINOR","PATCH")]; print(m[0]*10000+m[1]*100+m[2])' \
        "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" 2>/dev/null || echo)
    NCCL_RANKS_VERSION=$V on "$P4" a ta "$RANKS" realid 0 1 x >"$WORK/realid.0.out" 2>&1
    check "the real NCCL ($REAL, $V): bound, its version answered, its id tagged" [ $? = 0 ]
    grep -q FAILED "$WORK/realid.0.out" && { show realid; tail -5 "$WORK/s4.log"; }
else
    echo "skip the real NCCL check: no $REAL"
fi

PRE=$(ASAN_OPTIONS=verify_asan_link_order=0 RGPU_LIBDIR=$BUILD/lib "$BUILD/bin/rgpu" run -- sh -c 'echo "$LD_PRELOAD"')
check "rgpu run preloads the NCCL shim" [ "$PRE" = "$BUILD/lib/libnccl.so.2" ]
PRE=$(ASAN_OPTIONS=verify_asan_link_order=0 RGPU_NCCL=0 RGPU_LIBDIR=$BUILD/lib "$BUILD/bin/rgpu" run -- sh -c 'echo "$LD_PRELOAD"')
check "RGPU_NCCL=0 rgpu run does not" [ -z "$PRE" ]

[ "$FAILS" = 0 ] || for i in 1 2 3 6 7; do echo "--- server $i"; tail -30 "$WORK/s$i.log"; done
exit "$FAILS"
