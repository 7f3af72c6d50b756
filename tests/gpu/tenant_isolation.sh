#!/bin/bash
# Fault isolation of each sharing mode (issue 30; docs/tenants.md says what each guarantees): a
# long computation (tenant_load compute, its checksum compared with a native run alone) beside a
# neighbour that faults (fault_static: an out-of-bounds write, cudaErrorIllegalAddress) or hangs
# (tenant_load hang: one kernel spinning on every SM for HANG s), in three modes:
#   ts          rgpu, sharing = time-sliced (the compute gate; a stalled owner is passed after
#               100 ms): the neighbour must not change the result, and the computation must end
#               while the hung kernel still runs (device faults: tests/gpu/tenant_faults.sh)
#   mps         rgpu, sharing = mps (the server's own MPS daemon)
#   native-mps  natively, as clients of an MPS daemon this script starts (own directories)
# The MPS rows are measured and reported, not judged (NVIDIA documents that a fatal fault of one
# MPS client reaches every client on the GPU); each MPS row then checks that a new client runs
# once the affected ones have ended (the MPS server recovers). The last line is PASS when the
# time-sliced mode isolates and every mode recovers.
# Usage: tests/gpu/tenant_isolation.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
LAUNCHES=${TENANT_ISOLATION_LAUNCHES:-6000}
HANG=${TENANT_ISOLATION_HANG_S:-15}
MPSD=$(mktemp -d)
mkdir -p "$MPSD/pipe" "$MPSD/log"
MPS_ENV="CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe CUDA_MPS_LOG_DIRECTORY=$MPSD/log"
mps_stop() {
    local pid
    pid=$(cat "$MPSD/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
    echo quit | env $MPS_ENV timeout 15 nvidia-cuda-mps-control >/dev/null 2>&1
    for _ in $(seq 50); do [ -n "$pid" ] && [ -d "/proc/$pid" ] || break; sleep 0.2; done
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null
}
cleanup_all() { tenant_cleanup; mps_stop; rm -rf "$MPSD"; }
trap cleanup_all EXIT

native "$LOAD" compute "$LAUNCHES" >"$LOGS/iso.native" 2>"$LOGS/iso.native.err" || {
    echo "FAIL native computation: $(tail -2 "$LOGS/iso.native.err")"; exit 1; }
ALONE=$(sed -n 's/compute took \([0-9.]*\) s/\1/p' "$LOGS/iso.native.err")

# run_case MODE KIND: the computation beside the neighbour; sets OUTCOME (text), ISOLATED (0/1)
run_case() {
    local mode=$1 kind=$2 pre c n t0 crc nrc still=no secs
    case $mode in
        ts) pre="env $(tenant_env long long)" ;;
        mps) pre="env $(tenant_env long long)" ;;
        native-mps) pre="env LD_LIBRARY_PATH=$DEPS $MPS_ENV" ;;
    esac
    local npre=${pre/RGPU_TENANT=long RGPU_TOKEN=long/RGPU_TENANT=bad RGPU_TOKEN=bad}
    t0=$(date +%s.%N)
    timeout 120 $pre "$LOAD" compute "$LAUNCHES" >"$LOGS/iso.$mode.$kind" 2>"$LOGS/iso.$mode.$kind.err" &
    c=$!
    TPIDS+=("$c")
    sleep 1
    case $kind in
        oob) timeout 60 $npre "$B/bin/fault_static" >"$LOGS/iso.$mode.$kind.n" 2>&1 & ;;
        hang) timeout $((HANG + 30)) $npre "$LOAD" hang "$HANG" >"$LOGS/iso.$mode.$kind.n" 2>&1 & ;;
    esac
    n=$!
    TPIDS+=("$n")
    wait "$c"
    crc=$?
    secs=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
    kill -0 "$n" 2>/dev/null && still=yes
    kill "$n" 2>/dev/null
    wait "$n"
    nrc=$?
    ISOLATED=0
    if [ $crc -eq 0 ] && cmp -s "$LOGS/iso.native" "$LOGS/iso.$mode.$kind"; then
        ISOLATED=1
        OUTCOME="unharmed in ${secs} s (alone natively ${ALONE} s)"
    else
        OUTCOME="HURT (exit $crc: $(tail -1 "$LOGS/iso.$mode.$kind.err" | cut -c1-80)) after ${secs} s"
    fi
    [ "$kind" = hang ] && OUTCOME="$OUTCOME, hung kernel still running at its end: $still" &&
        [ "$still" = no ] && ISOLATED=0
    [ "$kind" = oob ] && OUTCOME="$OUTCOME; the faulting client: $(grep -o 'PASS\|cuda[A-Za-z]*Error[A-Za-z]*\|CUDA_ERROR_[A-Z_]*' "$LOGS/iso.$mode.$kind.n" | head -1)"
    echo "$mode $kind: computation $OUTCOME"
}

# recovered MODE: a new client runs once the affected ones have ended
recovered() {
    local pre
    case $1 in
        mps) pre="env $(tenant_env long long)" ;;
        native-mps) pre="env LD_LIBRARY_PATH=$DEPS $MPS_ENV" ;;
    esac
    for _ in 1 2 3 4 5; do
        timeout 60 $pre "$B/bin/vadd_static" >"$LOGS/iso.$1.recover" 2>&1 && return 0
        sleep 2
    done
    return 1
}

verdict=PASS
summary=()
# mps_cases MODE LABEL: the faulting and the hanging neighbour, each followed by a new client
mps_cases() {
    local k r
    for k in oob hang; do
        run_case "$1" $k
        if recovered "$1"; then r=recovered; else r="NOT recovered"; verdict=FAIL; fi
        summary+=("$2 $k: $([ $ISOLATED = 1 ] && echo unharmed || echo hurt), $r")
    done
}
start_tenant_server iso-ts '[tenant long]
token = long
[tenant bad]
token = bad'
run_case ts hang
[ $ISOLATED = 1 ] || verdict=FAIL
summary+=("time-sliced hang: $([ $ISOLATED = 1 ] && echo isolated || echo HURT)")
kill "$TSERVER_PID"
wait "$TSERVER_PID" 2>/dev/null

start_tenant_server iso-mps 'sharing = mps
[tenant long]
token = long
[tenant bad]
token = bad'
if grep -q "MPS control daemon pid" "$LOGS/iso-mps.server.log"; then
    mps_cases mps "rgpu mps"
else
    echo "mps: the server did not start its MPS daemon: $(tail -3 "$LOGS/iso-mps.server.log")"
    summary+=("rgpu mps: no daemon")
    verdict=FAIL
fi
kill "$TSERVER_PID"
wait "$TSERVER_PID" 2>/dev/null

if env $MPS_ENV timeout 20 nvidia-cuda-mps-control -d; then
    mps_cases native-mps "native mps"
    mps_stop
else
    summary+=("native mps: no daemon")
fi
echo "$verdict fault isolation: $(printf '%s; ' "${summary[@]}" | sed 's/; $//')"
[ $verdict = PASS ]
