#!/bin/bash
# Pools probed in rounds (docs/pool.md, "Pools that scale"), end to end: the real client
# (libcuda.so.1) against gpu-servers on the fake driver and up to 40 more members in one process
# that answer probes only (bench's rgpu-bench-pool-fake, each on its own loopback address, each
# counting the probes it answered). Shows: a job probes one round of probe_sample servers when
# it fits there; rounds go on until a server that can take it is found (sampling never refuses a
# job the pool has room for); a pool that is full is probed whole and the job refused naming
# every server; probe_sample = 0 probes all at once; a member that never answers does not hold
# the job for the probe's timeout, and one slower than the hedge is probed again when the others
# fail; gpus = 2 is placed over two rounds' answers.
# Usage: pool_scale_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
FAKE_POOL=$BUILD/bin/rgpu-bench-pool-fake
HOLD=$BUILD/tests/integration/hold_memory
DEVICES=$BUILD/tests/slurm/rgpu_devices
export LD_LIBRARY_PATH=$BUILD/lib FAKECUDA_MEM_MB=10240
export RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret RGPU_TRANSPORT=tcp RGPU_NCCL=0
export ASAN_OPTIONS=detect_leaks=0 HOME=$WORK RGPU_LOG_LEVEL=info
unset RGPU_SERVER RGPU_POOL RGPU_CONFIG RGPU_POLICY RGPU_PROBE_SAMPLE RGPU_GPUS

printf '[tenant alpha]\ntoken = alpha-secret\nmem_quota = 1GiB\n' >"$WORK/server.conf"
start_server() { # name
    local port
    port=$(free_port)
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$port" --driver "$FAKE" \
        --name "$1" >"$WORK/server-$1.log" 2>&1 &
    PIDS+=($!)
    wait_for "$WORK/server-$1.log" "listening on" || exit 1
    eval "$1=127.0.0.1:$port"
}
start_server R
start_server R2
FPORT=$(free_port)
FAKE_PID=
# fakes N [args...]: N members (127.1.0.1..) that answer probes "would not admit" (full) unless
# told otherwise; their entries in $FAKES
fakes() {
    local n=$1; shift
    [ -z "$FAKE_PID" ] || wait "$FAKE_PID" 2>/dev/null # the last ones, stopped by probes, gone
    "$FAKE_POOL" --count "$n" --port "$FPORT" --hosts "$WORK/hosts" --full "$n" "$@" \
        >"$WORK/fake.out" 2>&1 &
    FAKE_PID=$!
    PIDS+=($FAKE_PID)
    wait_for "$WORK/fake.out" "^listening" >/dev/null || exit 1
    FAKES=$(awk -v p="$FPORT" '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, p}' "$WORK/hosts")
}
probes() { # stop the fakes: how many probes they answered (called in $(...), a subshell, where
    # wait cannot wait for the fakes: their last line is waited for instead)
    kill -TERM "$FAKE_PID"
    wait_for "$WORK/fake.out" "^probes " >/dev/null
    sed -n 's/^probes //p' "$WORK/fake.out"
}
job() { # name env... : a short client (allocates, copies, checks)
    local name=$1; shift
    env "$@" "$HOLD" 16 0 >"$WORK/$name.out" 2>&1
}

# ---- one round when the job fits there -------------------------------------------------------
fakes 40
job first RGPU_POOL="$R,$FAKES" RGPU_POLICY=first RGPU_PROBE_SAMPLE=4
check "policy first, probe_sample 4, the server with room listed first: the job runs on it" \
    grep -q "PASS" "$WORK/first.out"
check "... having probed one round: 4 of 41 ($(grep -o "([0-9]* of the pool's [0-9]* servers probed)" "$WORK/first.out"))" \
    grep -q "pool: job placed on $R by policy first (the first listed of 1 that could take it) (4 of the pool's 41 servers probed)" "$WORK/first.out"
check "... the 3 other members of the round were probed, no other ($(probes))" \
    test "$(sed -n 's/^probes //p' "$WORK/fake.out")" = 3

# ---- rounds until room is found ----------------------------------------------------------------
fakes 40
for i in 1 2 3 4 5; do
    job spread$i RGPU_POOL="$FAKES,$R" RGPU_PROBE_SAMPLE=4
done
check "spread, probe_sample 4, the one server with room among 40 full ones: 5 jobs of 5 run on it" \
    test "$(grep -l "pool: job placed on $R by policy spread" "$WORK"/spread?.out | wc -l)" = 5
n=$(probes)
check "... the members answered fewer probes than probing all would ($n < 200)" test "$n" -lt 200

# ---- a full pool: every member probed, the job refused naming them --------------------------
fakes 40
job full RGPU_POOL="$FAKES" RGPU_PROBE_SAMPLE=4
check "a pool with no room: cuInit fails" grep -q "cuInit(0) failed" "$WORK/full.out"
check "... after probing all 40 members in rounds ($(probes) probes)" \
    test "$(sed -n 's/^probes //p' "$WORK/fake.out")" = 40
# (the one error names every server; a log line is cut at 1 KiB, common/log.c, so the first ones)
check "... one error naming them with the reason" \
    grep -q "error: no gpu-server of the pool can take this job; 40 tried: 127.1.0.1:$FPORT (insufficient GPU memory: the fake member is full); 127.1.0.2:$FPORT (insufficient" "$WORK/full.out"

# ---- probe_sample = 0: all at once ---------------------------------------------------------------
fakes 40
job all RGPU_POOL="$R,$FAKES" RGPU_POLICY=first RGPU_PROBE_SAMPLE=0
check "probe_sample 0 probes every member at once ($(probes) probes)" \
    test "$(sed -n 's/^probes //p' "$WORK/fake.out")" = 40
check "... and the job runs" grep -q "pool: job placed on $R by policy first" "$WORK/all.out"

# ---- a member that never answers ---------------------------------------------------------------
fakes 1 --slow 0 --slow-ms -1 --full 0
job silent RGPU_POOL="$FAKES,$R" RGPU_PROBE_TIMEOUT_MS=60000 RGPU_PROBE_SAMPLE=0
check "a member that never answers is passed over once the job fits, not after the 60 s timeout" \
    grep -q "pool: job placed on $R .*passed over: $FAKES (no answer to the probe in time)" "$WORK/silent.out"
probes >/dev/null

# ---- a member slower than the hedge is probed again when those that answered fail ------------
fakes 2 --slow 1 --slow-ms 300 --full 0
job late RGPU_POOL="$FAKES" RGPU_PROBE_TIMEOUT_MS=10000 RGPU_POLICY=first
SLOW=${FAKES#*,}
check "a member not waited for is probed again and tried once the others failed: $(grep -o "$SLOW ([^)]*" "$WORK/late.out" | head -1)" \
    eval 'grep -q "no gpu-server of the pool can take this job" "$WORK/late.out" &&
          grep -q "$SLOW ($SLOW answered the handshake" "$WORK/late.out" &&
          ! grep -q "$SLOW (no answer to the probe in time)" "$WORK/late.out"'
probes >/dev/null

# ---- gpus = 2 over rounds ----------------------------------------------------------------------
fakes 40
env RGPU_POOL="$FAKES,$R,$R2" RGPU_GPUS=2 RGPU_PROBE_SAMPLE=4 "$DEVICES" 16 >"$WORK/gpus2.out" 2>&1
check "gpus = 2, probe_sample 4, the two servers with room among 42: both found ($(grep -o "PASS.*" "$WORK/gpus2.out"))" \
    grep -q "^PASS devices=2" "$WORK/gpus2.out"
probes >/dev/null

echo "$FAILS failed"
[ "$FAILS" -eq 0 ]
