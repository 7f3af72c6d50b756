#!/bin/bash
# Pools end to end on the fake driver: three gpu-servers (10 GiB cards, tenant alpha with a
# 1 GiB quota: room for 10 sessions each) and two misbehaving members (fake_pool_server.py).
# Shows: rgpu status/top/ping and their exit status; placement by spread, pack and first as
# the servers count the sessions; failover on a refusal at the session's start, on a dead
# server and on a server that never answers, each job logging where it went and why; one error
# naming every server when none can take the job; the token file's permission check; and 20
# clients started at once against two servers with room for 10 each, all started, 10 and 10.
# Usage: pool_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
HOLD=$BUILD/tests/integration/hold_memory
RGPU=$BUILD/bin/rgpu
export LD_LIBRARY_PATH=$BUILD/lib FAKECUDA_MEM_MB=10240 RGPU_LIBDIR=$BUILD/lib
export RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret RGPU_TRANSPORT=tcp
# rgpu run preloads the NCCL shim, which the sanitizer build instruments: not wanted in programs
# that are not (hold_memory, true); nccl_e2e tests the preload
export RGPU_NCCL=0
unset RGPU_SERVER RGPU_POOL RGPU_CONFIG RGPU_POLICY
export HOME=$WORK # no ~/.config/rgpu/client.conf of the person running the test

cat >"$WORK/server.conf" <<CONF
[tenant alpha]
token = alpha-secret
mem_quota = 1GiB
[tenant beta]
token = beta-secret
mem_quota = 2GiB
CONF
start_server() { # name -> its port in $PORT_<name>
    local port
    port=$(free_port)
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$port" --driver "$FAKE" \
        --name "$1" >"$WORK/server-$1.log" 2>&1 &
    PIDS+=($!)
    eval "SPID_$1=$!"
    wait_for "$WORK/server-$1.log" "listening on" || exit 1
    eval "PORT_$1=$port"
}
start_fake() { # name mode
    python3 "$(dirname "$0")/fake_pool_server.py" "$WORK/port-$1" "$2" &
    PIDS+=($!)
    for _ in $(seq 50); do [ -s "$WORK/port-$1" ] && break; sleep 0.1; done
    eval "PORT_$1=$(cat "$WORK/port-$1")"
}
start_server A
start_server B
start_server C
start_fake liar liar
start_fake hang hang
start_fake old old
A=127.0.0.1:$PORT_A B=127.0.0.1:$PORT_B C=127.0.0.1:$PORT_C
LIAR=127.0.0.1:$PORT_liar HANG=127.0.0.1:$PORT_hang OLD=127.0.0.1:$PORT_old DEAD=127.0.0.1:$(free_port)

# sessions POOL -> alpha's sessions per server of POOL, in pool order ("1 0 2")
sessions() {
    "$RGPU" status --json --pool "$1" |
        python3 -c 'import json,sys;print(" ".join(str(s.get("tenant_sessions","-")) for s in json.load(sys.stdin)["servers"]))'
}
# hold NAME [ENV=VALUE...]: a client holding 16 MiB for 60 s, started with the pool in its
# environment; returns once it is ready (or failed)
HOLDERS=()
hold() {
    local name=$1; shift
    env ASAN_OPTIONS=detect_leaks=0 RGPU_LOG_LEVEL=info "$@" "$HOLD" 16 60 >"$WORK/$name.out" 2>&1 &
    HOLDERS+=($!)
    PIDS+=($!)
    wait_for "$WORK/$name.out" "ready" >/dev/null || echo "    $name did not start: $(cat "$WORK/$name.out")"
}
release() { # end the holders, wait until no alpha session is left on A, B and C
    for p in "${HOLDERS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    HOLDERS=()
    for _ in $(seq 100); do [ "$(sessions "$A,$B,$C")" = "0 0 0" ] && return; sleep 0.1; done
    echo "    sessions left: $(sessions "$A,$B,$C")"
}
# job NAME [ENV=VALUE...]: a short client (allocates, copies, checks) that logs at info level
job() {
    local name=$1; shift
    env ASAN_OPTIONS=detect_leaks=0 RGPU_LOG_LEVEL=info "$@" "$HOLD" 16 0 >"$WORK/$name.out" 2>&1
}

# ---- rgpu status, top, ping ------------------------------------------------------------------
"$RGPU" status --pool "$A,$B,$C,$DEAD" >"$WORK/status.txt" 2>&1
check "rgpu status answers with every server and exits 0 when some answered (exit $?)" \
    test "$(grep -c "^127.0.0.1:.* 0  rgpu fake device " "$WORK/status.txt")" = 3
check "... and names the dead one" grep -q "^$DEAD  *unreachable" "$WORK/status.txt"
"$RGPU" status --pool "$DEAD" >/dev/null 2>&1
check "rgpu status exits 1 when no server answers" test $? = 1
check "rgpu status --json: total, free and tenant fields" test "$("$RGPU" status --json --pool "$A" |
    python3 -c 'import json,sys;s=json.load(sys.stdin)["servers"][0];g=s["gpus"][0];print(s["answered"],g["memory_total_bytes"]>>30,g["memory_free_bytes"]>>30,s["memory_quota_bytes"]>>30,s["admit"])')" = "True 10 10 1 True"
forks=$(grep -c "worker pid" "$WORK/server-A.log")
RGPU_TOKEN=wrong "$RGPU" status --pool "$A" >"$WORK/status-bad.txt" 2>&1
check "a wrong token gets no figures, only the refusal (exit $?)" \
    grep -q "refused the probe: authentication failed" "$WORK/status-bad.txt"
# a probe of another protocol version: refused with the reason (proto's framing by hand)
reply=$(python3 -c '
import socket, sys
sys.path.insert(0, sys.argv[1])
from fake_pool_server import HDR, PROBE, field, frame, recv_exact
c = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
c.sendall(frame(PROBE, field(1, 99) + field(2, "alpha") + field(3, "alpha-secret")))
_, kind, _, n, _, _ = HDR.unpack(recv_exact(c, HDR.size))
print(kind, recv_exact(c, n))' "$(dirname "$0")" "$PORT_A" 2>&1)
check "a probe of another protocol version is refused with the reason ($reply)" \
    eval 'echo "$reply" | grep -q "^9 .*protocol version mismatch"'
# both refused by the supervisor before any fork, as a Hello is (server/supervisor.c on_probe)
check "... both refused by the supervisor, no worker forked" \
    test "$(grep -c "worker pid" "$WORK/server-A.log") $(grep -c "refused the probe of" "$WORK/server-A.log")" = "$forks 2"
# the Probe carries MAJOR.MINOR and is judged by the Hello's rule (proto_version_accept): the
# previous minor and a newer one of the same major are answered, and the reply says the server's
# version; an older minor (1.0 sends no minor field) and another major are refused with a reason
# naming both
probe_version() { # fields of the Probe's version, e.g. "1" or "1 7" -> "status minor reason"
    python3 -c '
import socket, sys
sys.path.insert(0, sys.argv[1])
from fake_pool_server import HDR, PROBE, field, fields, frame, recv_exact
v = [int(x) for x in sys.argv[3].split()]
c = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
c.sendall(frame(PROBE, b"".join(field(n, x) for n, x in zip((1, 5), v)) +
                field(2, "alpha") + field(3, "alpha-secret")))
_, kind, _, n, _, _ = HDR.unpack(recv_exact(c, HDR.size))
f = fields(recv_exact(c, n))
print(kind, f.get(2, 0), "%d.%d" % (f.get(1, 0), f.get(11, 0)), f.get(3, b"").decode())' \
        "$(dirname "$0")" "$PORT_A" "$1" 2>&1
}
MINOR=$(awk '/#define PROTO_VERSION_MINOR/ {print $3 + 0}' "$(dirname "$0")/../../proto/frame.h")
reply=$(probe_version "1 $((MINOR - 1))")
check "a 1.$((MINOR - 1)) probe (the previous minor) is answered, the reply says 1.$MINOR ($reply)" \
    test "$reply" = "9 0 1.$MINOR "
reply=$(probe_version "1")
check "a 1.0 probe (no minor: older than the previous) is refused naming both ($reply)" \
    eval 'echo "$reply" | grep -q "^9 [1-9][0-9]* 1.$MINOR protocol version too old: client speaks 1.0, server speaks 1.$MINOR"'
reply=$(probe_version "1 $((MINOR + 5))")
check "a 1.$((MINOR + 5)) probe (newer minor) is answered ($reply)" test "$reply" = "9 0 1.$MINOR "
reply=$(probe_version "2 0")
check "a 2.0 probe is refused naming both versions ($reply)" \
    eval 'echo "$reply" | grep -q "^9 [1-9][0-9]* 1.$MINOR protocol version mismatch: client speaks 2, server speaks 1"'
"$RGPU" top --once --pool "$A,$B" >"$WORK/top.txt" 2>&1
check "rgpu top --once prints one screen (exit $?)" grep -q "^SERVER .*UTIL" "$WORK/top.txt"
"$RGPU" ping --count 20 --bandwidth --json --pool "$A,$DEAD" >"$WORK/ping.json" 2>"$WORK/ping.err"
check "rgpu ping --bandwidth: percentiles, copy bandwidth through a session and the TCP ceiling (exit $?)" \
    test "$(python3 -c 'import json,sys;a,d=json.load(open(sys.argv[1]))["servers"];b=a["bandwidth"];print(a["rtt_us"]["p50"]>0,b["htod_bytes_per_second"]>0,b["dtoh_bytes_per_second"]>0,b["tcp_ceiling_bytes_per_second"]>0,d["answered"])' "$WORK/ping.json")" = "True True True True False"

# ---- placement -------------------------------------------------------------------------------
for i in 1 2 3; do hold spread$i RGPU_POOL="$A,$B,$C" RGPU_POLICY=spread; done
check "spread: three jobs on three servers ($(sessions "$A,$B,$C"))" test "$(sessions "$A,$B,$C")" = "1 1 1"
grep -q "pool: job placed on .* by policy spread (the least loaded" "$WORK/spread3.out" ||
    fail "spread's info line: $(grep pool: "$WORK/spread3.out")"
release
for i in 1 2 3; do hold pack$i RGPU_POOL="$A,$B,$C" RGPU_POLICY=pack; done
got=$(sessions "$A,$B,$C")
check "pack: three jobs on one server ($got)" test "$(echo "$got" | tr ' ' '\n' | sort | tr '\n' ' ')" = "0 0 3 "
release
for i in 1 2; do hold first$i RGPU_POOL="$C,$A,$B" RGPU_POLICY=first; done
got=$(sessions "$C,$A,$B")
# A server before the first that fits may be passed over when it answers later than the hedge
# (docs/pool.md, "Not waiting for stragglers"): on a loaded host C's probe worker can be that
# slow. Then the job says so, and goes to the next server listed.
late=$(grep -hF "$C (no answer to the probe in time)" "$WORK/first2.out")
check "first: two jobs on the first server listed ($got${late:+; the second passed over a late $C})" \
    test "$got" = "2 0 0" -o \( -n "$late" -a "$got" = "1 1 0" \)
[ "$got" = "2 0 0" ] || grep -h "pool:" "$WORK"/first[12].out | sed 's/^/    /' # where, why
release
job runmem RGPU_POOL="$B" RGPU_MEM_QUOTA=bogus
check "a bad value in the configuration ends cuInit with the reason" \
    grep -q "client configuration: environment: RGPU_MEM_QUOTA = bogus: expected a size" "$WORK/runmem.out"
ASAN_OPTIONS=detect_leaks=0 "$RGPU" run --pool "$B,$C" --memory 512MiB --policy first -- "$HOLD" 16 3 \
    >"$WORK/run.out" 2>&1 &
RUN=$!
wait_for "$WORK/run.out" ready >/dev/null
check "rgpu run --pool --memory --policy: on the first, with the 512 MiB asked for" test \
    "$("$RGPU" status --json --pool "$B" | python3 -c 'import json,sys;g=json.load(sys.stdin)["servers"][0]["gpus"][0];print(g["tenant_sessions"],g["memory_reserved_bytes"]>>20)')" = "1 512"
wait "$RUN"
check "... and it ran to the end" grep -q PASS "$WORK/run.out"
"$RGPU" run --memory lots -- true 2>/dev/null
check "rgpu run --memory with a bad size exits 2" test $? = 2
"$RGPU" run --memory "2 TiB" -- true
check "rgpu run --memory takes the one size grammar (rg_parse_size: spaces, TiB)" test $? = 0
# the client library beside an installed rgpu (RGPU_LIBDIR unset): <exe>/../lib/rgpu where
# libcuda.so.1 is there (/usr/bin/rgpu, /usr/lib/rgpu), else <exe>/../lib (the build tree)
mkdir -p "$WORK/inst/bin" "$WORK/inst/lib/rgpu"
cp "$RGPU" "$WORK/inst/bin/rgpu"
cp "$BUILD/lib/libcuda.so.1" "$WORK/inst/lib/rgpu/"
check "rgpu run finds <exe>/../lib/rgpu/libcuda.so.1 first" test "$(env -u RGPU_LIBDIR \
    "$WORK/inst/bin/rgpu" run -- sh -c 'echo "${LD_LIBRARY_PATH%%:*}"')" = "$WORK/inst/bin/../lib/rgpu"
mv "$WORK/inst/lib/rgpu/libcuda.so.1" "$WORK/inst/lib/"
check "... else <exe>/../lib" test "$(env -u RGPU_LIBDIR \
    "$WORK/inst/bin/rgpu" run -- sh -c 'echo "${LD_LIBRARY_PATH%%:*}"')" = "$WORK/inst/bin/../lib"

# ---- failover --------------------------------------------------------------------------------
job refusal RGPU_POOL="$LIAR,$A" RGPU_POLICY=first
check "failover on a refusal at the session's start: the job runs on the next server" \
    grep -q PASS "$WORK/refusal.out"
check "... and its one info line says where and why" grep -q \
    "pool: job placed on $A by policy first (choice 2 of 2 that could take it, after those before it failed); passed over: $LIAR (gpu-server at $LIAR refused the session: session limit reached: the room went to another client)" \
    "$WORK/refusal.out"
job dead RGPU_POOL="$DEAD,$A" RGPU_POLICY=first
check "failover on a dead server" grep -q "pool: job placed on $A .*passed over: $DEAD (unreachable: " "$WORK/dead.out"
t0=$(date +%s)
job timeout RGPU_POOL="$HANG,$A" RGPU_POLICY=first RGPU_PROBE_TIMEOUT_MS=1000
check "failover on a server that never answers, within the probe's bound ($(($(date +%s) - t0)) s)" \
    grep -q "pool: job placed on $A .*passed over: $HANG (no answer to the probe in time)" "$WORK/timeout.out"
job none RGPU_POOL="$DEAD,$HANG,$LIAR" RGPU_PROBE_TIMEOUT_MS=1000
check "no server can take it: cuInit fails" grep -q "cuInit(0) failed" "$WORK/none.out"
check "... with one error naming every server tried and why" test "$(grep -c "error: no gpu-server of the pool can take this job; 3 tried: .*$DEAD (unreachable: .*$HANG (no answer to the probe in time).*$LIAR (gpu-server at $LIAR refused the session" "$WORK/none.out")" = 1
check "... and nothing else at error level" test "$(grep -c " error: " "$WORK/none.out")" = 1
job old RGPU_POOL="$OLD,$DEAD" RGPU_POLICY=first
check "a server that closes at the probe (older than probes) is still tried, last" grep -q \
    "no gpu-server of the pool can take this job; 2 tried: $DEAD (unreachable: .*); $OLD (gpu-server at $OLD refused the session: the old server is full)" "$WORK/old.out"
for i in 1 2 3 4 5; do hold beta$i RGPU_POOL="$A" RGPU_TENANT=beta RGPU_TOKEN=beta-secret; done
job full RGPU_POOL="$A,$B" RGPU_POLICY=first
check "a server without room for the quota asked is passed over with the admission's reason" \
    grep -q "pool: job placed on $B .*passed over: $A (insufficient GPU memory: tenant 'alpha' needs a 1.00 GiB quota but GPU 0 has 0.00 GiB left" "$WORK/full.out"
"$RGPU" status --json --pool "$A" >"$WORK/status-alpha.json"
check "alpha's status shows beta's sessions as a count only, never its name or reservation" \
    test "$(python3 -c 'import json,sys;t=open(sys.argv[1]).read();g=json.loads(t)["servers"][0]["gpus"][0];print("beta" in t, g["sessions"], g["tenant_sessions"], g["memory_reserved_bytes"], g["memory_free_bytes"]>>30)' "$WORK/status-alpha.json")" = "False 5 0 0 0"
release

# ---- a server that dies during a job: that job's calls fail; it does not move ----------------
start_server D
D=127.0.0.1:$PORT_D
env ASAN_OPTIONS=detect_leaks=0 RGPU_POOL="$D,$A" RGPU_POLICY=first "$BUILD/tests/integration/server_death" plain \
    >"$WORK/death.out" 2>&1 &
VICTIM=$!
PIDS+=($VICTIM)
wait_for "$WORK/death.out" running >/dev/null
pkill -9 -P "$SPID_D" # its workers, then the supervisor
kill -9 "$SPID_D"
timeout 60 tail --pid="$VICTIM" -f /dev/null
check "a server dying mid-job ends that job's calls with DEVICE_UNAVAILABLE ($(tail -1 "$WORK/death.out"))" \
    grep -q "first error CUDA_ERROR_DEVICE_UNAVAILABLE" "$WORK/death.out"
check "... and the job does not move to another server (live state is not migrated)" \
    test "$(sessions "$A")" = 0

# ---- token file --------------------------------------------------------------------------------
echo alpha-secret >"$WORK/token"
chmod 644 "$WORK/token"
job token644 RGPU_POOL="$A" RGPU_TOKEN= RGPU_TOKEN_FILE="$WORK/token"
check "a token file readable by others is refused with the reason" \
    grep -q "token_file $WORK/token is open to its group or others (mode 0644); it must be readable only by its owner" "$WORK/token644.out"
chmod 600 "$WORK/token"
printf '[client]\npool = %s\ntenant = alpha\ntoken_file = %s\n' "$A" "$WORK/token" >"$WORK/client.conf"
job token600 RGPU_TOKEN= RGPU_TENANT= RGPU_CONFIG="$WORK/client.conf"
check "a token file readable only by its owner is used (pool, tenant from RGPU_CONFIG)" grep -q PASS "$WORK/token600.out"
mkdir -p "$WORK/.config/rgpu"
cp "$WORK/client.conf" "$WORK/.config/rgpu/client.conf"
job homeconf RGPU_TOKEN= RGPU_TENANT=
check "~/.config/rgpu/client.conf is found without RGPU_CONFIG" grep -q "session .* on $A" "$WORK/homeconf.out"
rm "$WORK/.config/rgpu/client.conf"

# ---- 20 clients at once against two servers with room for 10 each ----------------------------
HOLDERS=()
for i in $(seq 20); do
    env ASAN_OPTIONS=detect_leaks=0 RGPU_LOG_LEVEL=info RGPU_POOL="$A,$B" "$HOLD" 16 60 \
        >"$WORK/many$i.out" 2>&1 &
    HOLDERS+=($!)
    PIDS+=($!)
done
for _ in $(seq 300); do
    [ "$(cat "$WORK"/many*.out | grep -c '^ready')" = 20 ] && break
    [ "$(grep -l " failed: " "$WORK"/many*.out | wc -l)" != 0 ] && break
    sleep 0.1
done
check "20 clients at once: all started ($(cat "$WORK"/many*.out | grep -c '^ready') ready)" \
    test "$(cat "$WORK"/many*.out | grep -c '^ready')" = 20
check "... split 10 and 10 ($(sessions "$A,$B"))" test "$(sessions "$A,$B")" = "10 10"
grep -h " failed: \| error: " "$WORK"/many*.out | head -3 | sed 's/^/    /'
echo "    $(grep -l 'passed over' "$WORK"/many*.out | wc -l) of them moved on after a refusal"
release

[ "$FAILS" = 0 ] && echo "pool_e2e: all passed" || echo "pool_e2e: $FAILS failed"
[ "$FAILS" = 0 ]
