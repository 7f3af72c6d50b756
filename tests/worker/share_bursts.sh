#!/bin/bash
# The compute gate is work-conserving and fair for CPU-bound sessions that launch bursts (issue
# 30), on the fake driver's model of one time-sliced GPU shared by processes
# (FAKECUDA_GPU_TIMELINE, tests/fakecuda/fakecuda.c): each request of share_load launches BURST
# sleep_us kernels of KERNEL_US asynchronously, synchronizes (the answer read back), then thinks
# THINK_US. The fake GPU runs the kernels of all the workers one at a time in launch order, and
# two events around a kernel also measure the other sessions' kernels it waited behind, as a
# real GPU's time slices do. On an H100 such sessions got through the time-sliced gate only
# ~0.84x what one gets alone (natively, the driver's time-slicing: ~1.8x), one at 49% of the mean.
#
# One session alone takes BURST x KERNEL_US of GPU + THINK_US + round trips per request (1 ms +
# 0.5 ms + ~0.3 ms); N = 4 of them want ~2.2 GPUs, so a work-conserving gate keeps the GPU
# saturated: 1 request per ms in all (the GPU's capacity, 3000 in SECS), ~1.8x one alone, a
# quarter each. The check: together at least BOUND of min(N x alone, the capacity), each
# session within SPREAD of the mean. The same runs under "sharing = mps" (the gate holds no
# launch: the fake GPU's own time-slicing) are the reference, printed and held to the same bound
# (if they fail it, the model is broken, not the gate).
#
# Measured before the gate was fixed, 3 s runs on a 2-core host, idle and beside two busy
# loops (26 runs): the gate 69%-74% of the GPU (1.21x-1.51x one alone), sessions 94%-104% of
# the mean, its launches held at the gate ~2/3 of the time; sharing = mps 98%-100% of the GPU
# (1.76x-2.23x one alone: a loaded host slows the lone session's round trips, not the saturated
# GPU, hence the bound on the capacity rather than on x alone), sessions 91%-106% of the mean.
# BOUND 0.85 lies midway. The workload: short kernels in bursts that want more than the GPU. 20 x 50
# us kernels showed it as well on an idle host (the gate 1.28x-1.36x alone, mps ~1.8x) but not
# reliably beside busy loops (the gate 83%-90% of the GPU: clients that cannot outrun 50 us
# kernels keep shallow queues, whose launches count as light); with 1 ms of think time (~1.7 GPUs wanted) the
# gate kept up (2.26x alone, mps 2.28x).
# After the fix (a light launch charged 1/k of its elapsed time, k the sessions with launches in
# flight: server/compute_gate.c), 5 runs: 99%-100% of the GPU, sessions 94%-105% of the mean.
# Usage: share_bursts.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
LOAD=$BUILD/tests/worker/share_load
export LD_LIBRARY_PATH=$BUILD/lib
KERNEL_US=200
BURST=5
THINK_US=500
SECS=3
N=4
BOUND=0.85
SPREAD=0.15

serve() { # name [config line]: a server (its pid in $SERVER_PID, port in $PORT) on a new GPU
    PORT=$(free_port)
    MPORT=$(free_port)
    printf '[server]\nmetrics_listen = 127.0.0.1:%s\n%s\n' "$MPORT" "${2:-}" >"$WORK/$1.conf"
    FAKECUDA_GPU_TIMELINE=$WORK/$1.gpu XDG_RUNTIME_DIR=$WORK \
        PATH=$(cd "$(dirname "$0")" && pwd)/fake_mps:$PATH "$SERVER" --config "$WORK/$1.conf" \
        --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_for "$WORK/$1.log" "metrics on http" || exit 1
}
sample() { # file: /status once the N sessions run, and SECS - 1.5 s later, as [time, status] lines
    python3 - "http://127.0.0.1:$MPORT/status" "$SECS" "$N" >"$1" 2>/dev/null <<'PY'
import json, sys, time, urllib.request
get = lambda: json.load(urllib.request.urlopen(sys.argv[1]))
t0 = time.monotonic()
while len(get()["sessions"]) < int(sys.argv[3]) and time.monotonic() < t0 + float(sys.argv[2]):
    time.sleep(0.05)
time.sleep(0.2)
print(json.dumps([time.monotonic(), get()]), flush=True)
time.sleep(float(sys.argv[2]) - 1.5)
print(json.dumps([time.monotonic(), get()]), flush=True)
PY
}

run() { # name count: COUNT request loops at once for SECS; their request counts in $COUNTS
    local pids=()
    for i in $(seq "$2"); do
        env ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT \
            "$LOAD" "$SECS" "$KERNEL_US" "$THINK_US" "$BURST" >"$WORK/$1.$i" 2>&1 &
        pids+=("$!")
        PIDS+=("$!")
    done
    wait "${pids[@]}"
    COUNTS=$(cat "$WORK/$1".* | sed -n 's/^requests=//p' | tr '\n' ' ')
}

# measure name [config line]: one session alone, then N together: "ALONE R1 ... RN" in $RESULT
measure() {
    local alone sampler
    serve "$@"
    run "$1-alone" 1
    alone=${COUNTS:-0}
    # the sessions as the gate saw them over the middle of the together run (diagnostics)
    sample "$WORK/$1.status" &
    sampler=$!
    PIDS+=("$sampler")
    run "$1-together" $N
    wait "$sampler"
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null
    RESULT="$alone $COUNTS"
}

# what alone r1 ... rN: exit 0 when the N together reach BOUND of what a work-conserving gate
# gives: N x alone, or the GPU's capacity (SECS / (BURST x KERNEL_US) requests) if less
verdict() {
    python3 - "$@" <<PY
import sys
what, a, v = sys.argv[1], float(sys.argv[2]), [int(x) for x in sys.argv[3:]]
m, cap = sum(v) / len(v) if v else 0, $SECS * 1e6 / ($BURST * $KERNEL_US)
print("    %s: alone %d requests, together %s = %.2fx alone, %.0f%% of the GPU's %d;"
      " sessions %.0f%%-%.0f%% of the mean" % (what, a, " ".join(map(str, v)), sum(v) / a if a else 0,
      100 * sum(v) / cap, cap, 100 * min(v) / m if m else 0, 100 * max(v) / m if m else 0))
sys.exit(0 if a > 0 and len(v) == $N and sum(v) >= $BOUND * min($N * a, cap) else 1)
PY
}
fair() { # alone r1 ... rN: each within SPREAD of the mean
    python3 -c "import sys; v = [int(x) for x in sys.argv[2:]]; m = sum(v) / max(len(v), 1)
sys.exit(0 if len(v) == $N and all(abs(x - m) <= $SPREAD * m for x in v) else 1)" "$@"
}

echo "$N sessions, each request $BURST x $KERNEL_US us kernels + think $THINK_US us, $SECS s runs"
measure gate
gate=$RESULT
measure mps "sharing = mps"
mps=$RESULT
check "reference: under sharing = mps (the gate holds nothing) $N reach $BOUND of min($N x alone, the GPU)" \
    verdict "sharing = mps" $mps
check "the time-sliced gate: $N together reach $BOUND of min($N x alone, the GPU)" verdict gate $gate
check "the time-sliced gate: each session within $SPREAD of the mean" fair $gate
# The lone session's launches are sampled (one in 256 measured, charged for 256): its mean launch
# is still one launch's (it was 256 x one, ~51 ms, and a session's first contended launches
# looked heavy).
mean1=$(grep -m1 -o "measured launches;.*mean launch [0-9.]* us" "$WORK/gate.log" | grep -o "[0-9.]* us$")
check "the lone session's mean launch is one launch's ($mean1, kernels of $KERNEL_US us)" \
    python3 -c "import sys; sys.exit(0 if 0 < float('${mean1% us}' or 0) < 2 * $KERNEL_US else 1)"
# What each session's worker saw over the middle of the together run: the GPU time of its
# launches, the GPU time the gate charged it (under sharing = mps a 1-in-256 sample, which also
# holds the waits behind other sessions' kernels) and the time its launches waited at the gate.
for x in gate mps; do
    python3 - "$WORK/$x.status" "$KERNEL_US" "$x" <<'PY' 2>&1 | sed 's/^/    /'
import json, sys
try:
    (t1, a), (t2, b) = [json.loads(l) for l in open(sys.argv[1])]
    a = {s["id"]: s for s in a["sessions"]}
    b = [s for s in b["sessions"] if s["id"] in a]
except Exception as e:
    print("%s: no status (%s)" % (sys.argv[3], e))
    b = []
if b:
    print("%s, per session over %.2f s of the together run: GPU s of its launches (x %s us), charged,"
          " held at the gate" % (sys.argv[3], t2 - t1, sys.argv[2]))
for s in sorted(b, key=lambda s: s["id"]):
    d = {k: s[k] - a[s["id"]][k] for k in s if k.endswith("_total")}
    print("  session %d: %.2f, %.2f, %.2f" % (s["id"], d["launches_total"] * int(sys.argv[2]) / 1e6,
                                             d["gpu_seconds_total"], d["gate_held_seconds_total"]))
PY
done
grep -h "compute gate\|completed nothing" "$WORK/gate.log" | sed 's/^.*gpu-server\[[0-9]*\] /      /'

if [ $FAILS -ne 0 ]; then
    echo "$FAILS check(s) failed"
    exit 1
fi
echo "all checks passed"
