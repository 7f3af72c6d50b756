#!/bin/bash
# The attack figures of issue 27 (not a CI test: numbers for tests/server/results/), on the fake
# driver, against any build (main at 4468ff0 too):
#   1. probes: tenant mallory, max_sessions = 2, asks 30 probes at once, each kept alive by an
#      Echo a second (of 64 bytes, then of 64 MiB) for 8 s: probes answered, worker processes,
#      their total RSS, and whether another tenant's session is served meanwhile (server
#      max_sessions = 32);
#   2. the pre-Hello table held from 300 addresses (600 connections that send nothing, each
#      reopened as soon as it is closed, for 30 s): a prompt Hello from another address (20
#      tries, no retry) and the client library (hold_memory, 10 runs);
#   3. timing: the median time from Hello to refusal for an unknown tenant and for a known one
#      with a wrong token (token_sha256 and plain token), 2,000 rounds each.
# Usage: attack27.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
HOLD=$BUILD/tests/integration/hold_memory
export LD_LIBRARY_PATH=$BUILD/lib
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
field() { python3 -c 'import json,sys;print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
PORT=$(free_port)
cat >"$WORK/server.conf" <<CONF
[server]
max_sessions = 32
[tenant mallory]
token = mallory-secret
max_sessions = 2
[tenant alpha]
token = alpha-secret
[tenant hashed]
token_sha256 = $(printf 'hashed-secret' | sha256sum | cut -d' ' -f1)
CONF
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "listening on" >/dev/null || exit 1
echo "# gpu-server $(cd "$BUILD/.." && git rev-parse --short HEAD 2>/dev/null || echo '?') ($BUILD), $(date -u +%FT%TZ), $(nproc) cores"

# 1. probes: kept alive by small echoes (slots held), then by 64 MiB ones (memory pinned)
probes() { # echo-bytes label
    $FLOOD --server "127.0.0.1:$PORT" --mode probe-hold --count 30 --duration 8 --hold-echo "$1" \
        --tenant mallory --token mallory-secret >"$WORK/probes.json" &
    local fp=$! pids rss legit
    sleep 5
    pids=$(children "$SERVER_PID" | tr '\n' ' ')
    rss=$(for p in $pids; do awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null; done |
          awk '{s += $1} END {printf "%.1f", s / 1024}')
    legit=$($FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode legit --count 20 \
                --tenant alpha --token alpha-secret)
    wait "$fp"
    echo "1. mallory (max_sessions = 2) asks 30 probes kept alive by $2 echoes; 5 s in:"
    echo "   worker processes: $(echo $pids | wc -w); their RSS: $rss MiB; another tenant's session served: $(field "$legit" served)"
    echo "   mallory: $(cat "$WORK/probes.json")"
    for _ in $(seq 50); do [ -z "$(children "$SERVER_PID")" ] && break; sleep 0.1; done
}
probes 64 "64-byte"
probes $((64 << 20)) "64 MiB"

# 2. many-address flood
$FLOOD --server "127.0.0.1:$PORT" --mode reflood --count 600 --sources 300 --duration 30 \
    >"$WORK/reflood.json" &
FP=$!
sleep 3
raw=0 lib=0
for i in $(seq 20); do
    r=$($FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode legit --count 5 --tenant alpha \
            --token alpha-secret)
    [ "$(field "$r" served)" = True ] && raw=$((raw + 1))
done
t0=$(date +%s.%N)
for i in $(seq 10); do
    as alpha alpha-secret timeout 60 "$HOLD" 1 0 >"$WORK/hold.out" 2>&1 && grep -q PASS "$WORK/hold.out" &&
        lib=$((lib + 1))
done
t1=$(date +%s.%N)
wait "$FP"
echo "2. pre-Hello table held from 300 addresses (600 connections, reopened when closed):"
echo "   a prompt Hello (no retry) served $raw of 20; the client library served $lib of 10 ($(echo "($t1 - $t0) / 10" | bc -l | cut -c1-5) s each)"
echo "   flood: $(cat "$WORK/reflood.json")"
sleep 2

# 3. timing
for t in hashed alpha; do
    echo "3. refusal timing, tenant '$t' ($([ $t = hashed ] && echo token_sha256 || echo plain token)): $($FLOOD --server "127.0.0.1:$PORT" --mode auth-timing --count 2000 --tenant $t)"
done
