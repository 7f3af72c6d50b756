#!/bin/bash
# The compute gate is work-conserving (issue 30, the CPU-bound regression), on the fake driver:
# sessions of a CPU-bound request loop (one short kernel, a synchronize, then host "think" time)
# leave the GPU idle most of the time, so N of them together must reach nearly N times what one
# reaches alone. Before the fix the gate served them one at a time in turns of about a quantum
# (the owner holds the GPU through its host time, since its gaps are shorter than the 2 ms
# grace): together they got about what one gets alone (on the H100, ResNet-18 b1 read back per
# request: 600 req/s alone, 490 for four, 382 for eight).
#
# Why it is not timing-flaky: the kernel is the fake's sleep_us (KERNEL_US of "GPU" time, slept)
# and the think time is slept too, so a request takes about KERNEL_US + THINK_US plus a round
# trip whatever the host's load, and the fake GPU runs every session's kernels at once (busy
# ~1% of the time per session). The kernel is tiny so that, however much a loaded host
# oversleeps it, the gate still sees light work (its measured time stays far below the 0.5 ms
# light threshold; with 200 us kernels a loaded host measured 0.7 ms and the test flaked).
# Served one at a time, four sessions get about 1x one session (measured 0.99-1.07x); served as
# they come, about 4x (measured 3.5-3.85x on a loaded 2-core host). The bound, BOUND x N x
# alone = 3.0x, is far from both: the four clients' round trips may stretch on a loaded host by
# 25% more than the lone one's, and turns cannot reach it.
# Usage: share_light.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
LOAD=$BUILD/tests/worker/share_load
export LD_LIBRARY_PATH=$BUILD/lib
KERNEL_US=10 # see above
THINK_US=1000
SECS=3
N=4
BOUND=0.75

PORT=$(free_port)
"$SERVER" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" >"$WORK/server.log" 2>&1 &
PIDS+=("$!")
wait_for "$WORK/server.log" "listening" || exit 1

run() { # name count: COUNT request loops at once for SECS; their request counts in $WORK/name.*
    local pids=()
    for i in $(seq "$2"); do
        env ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT \
            "$LOAD" "$SECS" "$KERNEL_US" "$THINK_US" >"$WORK/$1.$i" 2>&1 &
        pids+=("$!")
        PIDS+=("$!")
    done
    wait "${pids[@]}"
    cat "$WORK/$1".* | sed -n 's/^requests=//p' | tr '\n' ' '
}

alone=$(run alone 1)
together=$(run together $N)
check "one CPU-bound session alone: ${alone:-?}requests in $SECS s" test -n "$alone"
check "$N CPU-bound sessions together reach at least $BOUND x $N x one alone (requests: ${together:-?})" \
    python3 -c "import sys; a = float(sys.argv[1]); v = [int(x) for x in sys.argv[2:]]
print('    together %.2fx one alone' % (sum(v) / a))
sys.exit(0 if len(v) == $N and sum(v) >= $BOUND * $N * a else 1)" ${alone:-0} $together
check "none of them starved (each above half the mean)" \
    python3 -c "import sys; v = [int(x) for x in sys.argv[1:]]; sys.exit(0 if len(v) == $N and min(v) > sum(v) / len(v) / 2 else 1)" $together

if [ $FAILS -ne 0 ]; then
    echo "$FAILS check(s) failed; server log:"
    tail -20 "$WORK/server.log"
    exit 1
fi
echo "all checks passed"
