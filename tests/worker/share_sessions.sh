#!/bin/bash
# The compute gate shares the GPU fairly between sessions, not only between tenants (issue 30),
# on the fake driver: every client launches the fake's sleep_us kernel (2 ms of "GPU" time each,
# slept, so the measured time does not depend on the host's load) back to back, synchronizing
# every 4 launches. The verdicts use the GPU seconds the gate measured per session (/status)
# over 3 s of contention: each session within 15% of its due share.
#   1. three sessions of one tenant: a third each (before issue 30 the session that owned the
#      GPU kept it while it had work: one got nearly all of it);
#   2. one of them leaves and a session of a second tenant of half the weight joins: the first
#      tenant's weight is divided between its two sessions, so all three are equal again;
#   3. a session whose kernel "hangs" (3 s) does not stop another: after 100 ms without
#      progress the gate lets the other launch beside it (before, it waited for the kernel);
#   4. "sharing = mps", with a stand-in for NVIDIA's control program (fake_mps/): the server
#      runs its own daemon in its own directories, the workers are its clients with the
#      tenant's cap and quota as MPS's limits, the gate lets their kernels run at the same time,
#      and the daemon is told to quit and its directories removed when the server stops.
# Usage: share_sessions.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
LOAD=$BUILD/tests/worker/share_load
export LD_LIBRARY_PATH=$BUILD/lib
KERNEL_US=2000
SECS=3

get() { python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://127.0.0.1:$MPORT/$1"; }
# gpu_seconds: "ID SECONDS" per live session
gpu_seconds() {
    get status | python3 -c 'import json,sys
for x in json.load(sys.stdin)["sessions"]: print(x["id"], x["tenant"], x["gpu_seconds_total"])'
}

PORT=$(free_port)
MPORT=$(free_port)
cat >"$WORK/server.conf" <<EOF
[server]
metrics_listen = 127.0.0.1:$MPORT
[tenant team]
token = team-secret
weight = 2
[tenant solo]
token = solo-secret
weight = 1
EOF
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
PIDS+=("$!")
wait_for "$WORK/server.log" "metrics on http" || exit 1

start() { # tenant token name [kernel_us]: a saturating client until killed; its pid in $LAST
    # (env execs the client, so that $! is the client itself)
    env ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT RGPU_TENANT=$1 RGPU_TOKEN=$2 \
        "$LOAD" 0 "${4:-$KERNEL_US}" >"$WORK/$3.out" 2>&1 &
    LAST=$!
    PIDS+=("$LAST")
    wait_for "$WORK/$3.out" ready || exit 1
}

# measure WHAT: every live session's GPU seconds over $SECS s of contention; each within 15%
# of the mean (all sessions here are due equal shares)
measure() {
    sleep 0.5 # every client past its first launches
    gpu_seconds >"$WORK/t0"
    t0=$(date +%s.%N)
    sleep "$SECS"
    gpu_seconds >"$WORK/t1"
    python3 - "$WORK/t0" "$WORK/t1" "$(python3 -c "import time; print(round(time.time() - $t0, 2))")" "$1" <<'PY'
import sys
a = {l.split()[0]: float(l.split()[2]) for l in open(sys.argv[1])}
rows = [l.split() for l in open(sys.argv[2])]
d = {r[0]: (r[1], float(r[2]) - a.get(r[0], 0.0)) for r in rows}
mean = sum(v for _, v in d.values()) / len(d)
worst = max(abs(v - mean) / mean for _, v in d.values()) if mean > 0 else 1
print("%s: %s; GPU busy %.0f%% of %s s; worst %.0f%% from the mean" % (
    sys.argv[4], ", ".join("session %s (%s) %.2f s" % (k, t, v) for k, (t, v) in sorted(d.items())),
    100 * sum(v for _, v in d.values()) / float(sys.argv[3]), sys.argv[3], 100 * worst))
sys.exit(0 if len(d) >= 3 and worst <= 0.15 else 1)
PY
}

start team team-secret a
A=$LAST
start team team-secret b
B_C=$LAST
start team team-secret c
B_C="$B_C $LAST"
check "three sessions of one tenant get a third each, within 15%" measure "one tenant"
# What the operator sees: each session's due share and launch rate in /metrics, the tenant's
# share of the GPU (now / due) in rgpu status.
# (sampled once a second: a client that the loaded host holds off for 10 ms counts as idle at
# that instant, so up to ten samples)
due_ok() {
    python3 - "$WORK/metrics.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
due = [float(v) for v in re.findall(r'^rgpu_session_gpu_share_due\{tenant="team",session="\d+"\} (\S+)', t, re.M)]
tdue = float(re.search(r'^rgpu_tenant_gpu_share_due\{tenant="team"\} (\S+)', t, re.M).group(1))
rate = [float(v) for v in re.findall(r'^rgpu_session_launches_per_second\{tenant="team",session="\d+"\} (\S+)', t, re.M)]
sys.exit(0 if len(due) == 3 and all(abs(d - 1 / 3) < 0.01 for d in due) and abs(tdue - 1) < 0.01
         and len(rate) == 3 and all(r > 0 for r in rate) else 1)
PY
}
for _ in $(seq 10); do
    get metrics >"$WORK/metrics.txt"
    due_ok && break
    sleep 1
done
check "/metrics: each session is due a third, the tenant the whole GPU, launch rates ($(grep -E '^rgpu_(session|tenant)_(gpu_share_due|launches_per_second)' "$WORK/metrics.txt" | tr '\n' ' '))" \
    due_ok
RGPU_TENANT=team RGPU_TOKEN=team-secret "$BUILD/bin/rgpu" status --json --pool "127.0.0.1:$PORT" \
    >"$WORK/status.json" 2>&1
share=$(python3 -c 'import json,sys; g = json.load(open(sys.argv[1]))["servers"][0]["gpus"][0]; print("%.2f %.2f" % (g["tenant_gpu_share"], g["tenant_gpu_share_due"]))' "$WORK/status.json" 2>/dev/null)
check "rgpu status: the tenant's share of the GPU now and due (${share:-?})" \
    python3 -c "import sys; a, d = map(float, sys.argv[1:3]); sys.exit(0 if a > 0.3 and abs(d - 1) < 0.01 else 1)" ${share:-x x}
kill "$A"
wait "$A" 2>/dev/null
for _ in $(seq 50); do [ "$(gpu_seconds | wc -l)" = 2 ] && break; sleep 0.1; done
start solo solo-secret d
D=$LAST
check "weight 2 divided between a tenant's two sessions, beside a weight-1 tenant: equal thirds within 15%" \
    measure "after a leave and a join"

# 3. a stalled owner: d keeps saturating; h launches 3 s kernels. Over 2 s from h's first one,
# d must still get a good part of the GPU (the gate passes h after 100 ms without progress;
# without that, d got nothing; on an idle host it gets most of it).
for p in $B_C; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
for _ in $(seq 50); do [ "$(gpu_seconds | wc -l)" = 1 ] && break; sleep 0.1; done
D_ID=$(gpu_seconds | awk '{print $1; exit}')
start solo solo-secret h 3000000
H=$LAST
sleep 0.3
gpu_seconds >"$WORK/h0"
t0=$(date +%s.%N)
sleep 2
gpu_seconds >"$WORK/h1"
kill "$H"
dt=$(python3 -c "import time; print(time.time() - $t0)")
got=$(python3 - "$WORK/h0" "$WORK/h1" <<'PY'
import sys
a = {l.split()[0]: float(l.split()[2]) for l in open(sys.argv[1])}
b = {l.split()[0]: float(l.split()[2]) for l in open(sys.argv[2])}
print(" ".join("%s:%.2f" % (k, b[k] - a.get(k, 0)) for k in sorted(b)))
PY
)
check "a session beside a hung kernel keeps launching (GPU seconds over ${dt:0:4} s: $got)" \
    python3 -c "import sys; v = dict(x.split(':') for x in sys.argv[1:]); sys.exit(0 if float(v['$D_ID']) > 0.3 * $dt else 1)" $got
check "the gate logged the stall" grep -q "completed nothing for 100 ms" "$WORK/server.log"

# 4. sharing = mps
MPORT=$(free_port)
PORT=$(free_port)
cat >"$WORK/mps.conf" <<EOF
[server]
metrics_listen = 127.0.0.1:$MPORT
sharing = mps
[tenant team]
token = team-secret
cap = 50%
mem_quota = 1GiB
EOF
XDG_RUNTIME_DIR=$WORK PATH=$(cd "$(dirname "$0")" && pwd)/fake_mps:$PATH "$SERVER" \
    --config "$WORK/mps.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/mps.log" 2>&1 &
MPS_SERVER=$!
PIDS+=("$MPS_SERVER")
wait_for "$WORK/mps.log" "metrics on http" || exit 1
dir=$(sed -n 's/.*CUDA_MPS_PIPE_DIRECTORY=\([^,]*\),.*/\1/p' "$WORK/mps.log")
for _ in $(seq 50); do [ -s "$dir/nvidia-cuda-mps-control.pid" ] && break; sleep 0.1; done
daemon=$(cat "$dir/nvidia-cuda-mps-control.pid" 2>/dev/null)
check "the server started its own MPS daemon (pid ${daemon:-?}) in $dir" \
    test -n "$daemon" -a -p "$dir/control" -a "${dir#"$WORK"/rgpu-mps-}" != "$dir"
LOADS=()
for x in a b c; do
    env ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT RGPU_TENANT=team \
        RGPU_TOKEN=team-secret "$LOAD" "$SECS" "$KERNEL_US" >"$WORK/mps.$x" 2>&1 &
    LOADS+=("$!")
    PIDS+=("$!")
done
wait "${LOADS[@]}"
n=$(cat "$WORK"/mps.[abc] | sed -n 's/launches=//p' | tr '\n' ' ')
# one session alone would run SECS / KERNEL_US launches; serialized, three would share that
check "three sessions' kernels run at the same time (launches: $n; each above half of $((SECS * 1000000 / KERNEL_US)))" \
    python3 -c "import sys; v = [int(x) for x in sys.argv[1:]]; sys.exit(0 if len(v) == 3 and min(v) > $SECS * 1e6 / $KERNEL_US / 2 else 1)" $n
check "workers are MPS clients with the cap and the quota (plus 1 GiB) as limits" \
    grep -q "a client of the server's MPS daemon (active thread percentage 50, pinned device memory limit 0=2048M" "$WORK/mps.log"
kill "$MPS_SERVER"
wait "$MPS_SERVER"
check "stopping the server quits its MPS daemon and removes its directories" \
    test ! -e "$dir" -a ! -d "/proc/$daemon"

if [ $FAILS -ne 0 ]; then
    echo "$FAILS check(s) failed; server logs:"
    tail -20 "$WORK/server.log" "$WORK/mps.log"
    exit 1
fi
echo "all checks passed"
