#!/bin/bash
# The compute gate measures launches one by one only where sessions can contend: on the same
# GPU (issue 29: the ranks of a job on one server, one GPU each, paid the measured path on every
# kernel and collective, two timing events and a wake-up of the meter each, because the gate
# counted the sessions of the whole server). On the fake driver with two devices, counted from
# its trace (FAKECUDA_TRACE=1 names each driver call; a worker's output reaches its client), not
# timed:
# - two sessions on two GPUs at once: launches sampled (one in 256 measured), so timing events
#   are a small fraction of launches;
# - two sessions on one GPU at once (the control): every launch measured, about two events per
#   launch while both run (the check asks a quarter of that: the two may start apart on a loaded
#   host, and one alone is sampled).
# Usage: share_gpus.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
LOAD=$BUILD/tests/worker/share_load
export LD_LIBRARY_PATH=$BUILD/lib
SECS=2
KERNEL_US=1

# run NAME DEV0 DEV1: one server; two sessions at once on devices DEV0 and DEV1; prints the
# launches of both and the timing events the workers recorded.
run() {
    local port pids=() server launches events
    port=$(free_port)
    FAKECUDA_DEVICES=2 FAKECUDA_TRACE=1 "$SERVER" --listen 127.0.0.1 --port "$port" \
        --driver "$FAKE" >"$WORK/$1.server.log" 2>&1 &
    server=$!
    PIDS+=("$server")
    wait_for "$WORK/$1.server.log" "listening" >/dev/null || return 1
    for dev in "$2" "$3"; do
        env ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$port SHARE_LOAD_DEVICE=$dev \
            "$LOAD" "$SECS" "$KERNEL_US" >"$WORK/$1.load.$dev.$RANDOM" 2>&1 &
        pids+=("$!")
        PIDS+=("$!")
    done
    wait "${pids[@]}"
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    launches=$(cat "$WORK/$1".load.* | awk -F= '$1 == "launches" {n += $2} END {print n + 0}')
    # the workers' driver trace reaches their clients with the kernels' output (server/output.c)
    events=$(cat "$WORK/$1".load.* | grep -c "^fakecuda: cuEventRecordWithFlags$")
    echo "${launches:-0} $events"
}

read -r l_two e_two < <(run two_gpus 0 1)
read -r l_one e_one < <(run one_gpu 0 0)
echo "    two GPUs: $l_two launches, $e_two timing events; one GPU: $l_one launches, $e_one events"
check "the sessions ran (launches: $l_two on two GPUs, $l_one on one)" \
    test "${l_two:-0}" -gt 1000 -a "${l_one:-0}" -gt 1000
check "two sessions on two GPUs: launches sampled (events $e_two < launches $l_two / 8)" \
    test $((e_two * 8)) -lt "${l_two:-0}"
check "two sessions on one GPU: launches measured (events $e_one >= launches $l_one / 4)" \
    test $((e_one * 4)) -ge "${l_one:-0}"

if [ $FAILS -ne 0 ]; then
    echo "$FAILS check(s) failed; server logs (first lines) in $WORK"
    KEEP=1
    exit 1
fi
