#!/bin/bash
# The attack run of issue 15, measured (not a CI test: numbers for tests/server/results/):
# gpu-server on the fake driver with one tenant; then
#   1. 2,000 idle connections from 127.0.0.1 for 20 s;
#   2. a slowloris mix for 20 s: 20 Hellos at one byte a second, 20 half headers, 4 idle
#      authenticated sessions, 4 calls cut inside their message, 4 copies stalled after 1 MiB;
# and, during each, the gpu-server processes, their total RSS, and a tenant's client from
# 127.0.0.2 (served or not, handshake time, NOP round trips; and the wall time of the real
# client library running hold_memory). The same with no attack first, for reference.
# Usage: attack.sh BUILD_DIR [FLOOD_COUNT]   (BUILD_DIR of any version: main at 81b91e8 too)
set -u
BUILD=$(cd "$1" && pwd)
COUNT=${2:-2000}
. "$(dirname "$0")/../worker/tenant_lib.sh"
FLOOD="python3 $(dirname "$0")/flood.py"
HOLD=$BUILD/tests/integration/hold_memory
export LD_LIBRARY_PATH=$BUILD/lib
PORT=$(free_port)
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# Default limits but for the session deadlines, shortened to show within the 20 s of the run
# (versions before these keys log them as unknown and go on).
printf '[server]\nrecv_timeout_ms = 5000\nidle_timeout = 10\n[tenant alpha]\ntoken = alpha-secret\n[tenant mallory]\ntoken = mallory-secret\n' \
    >"$WORK/server.conf"
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "listening on" >/dev/null || exit 1

measure() { # label
    local pids n rss
    pids="$SERVER_PID $(children "$SERVER_PID" | tr '\n' ' ')"
    n=$(echo $pids | wc -w)
    rss=$(for p in $pids; do awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null; done |
          awk '{s += $1} END {printf "%.1f", s / 1024}')
    local t0 t1 legit hold
    legit=$($FLOOD --server "127.0.0.1:$PORT" --source 127.0.0.2 --mode legit --count 200 \
                --tenant alpha --token alpha-secret)
    t0=$(date +%s.%N)
    RGPU_SERVER=127.0.0.1:$PORT RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret timeout 60 \
        "$HOLD" 16 0 >"$WORK/hold.out" 2>&1
    hold=$?
    t1=$(date +%s.%N)
    printf '%-34s gpu-server processes: %5d   total RSS: %8s MiB\n' "$1" "$n" "$rss"
    printf '%-34s tenant client (protocol): %s\n' "" "$legit"
    printf '%-34s tenant client (hold_memory 16 0, real libcuda.so.1): exit %d in %.3f s%s\n' "" \
        "$hold" "$(echo "$t1 - $t0" | bc)" "$(grep -q PASS "$WORK/hold.out" || echo " ($(tail -1 "$WORK/hold.out" | cut -c1-100))")"
}

echo "# gpu-server $(cd "$BUILD/.." && git rev-parse --short HEAD 2>/dev/null || echo '?') ($BUILD), $(date -u +%FT%TZ), $(nproc) cores"
measure "no attack"

$FLOOD --server "127.0.0.1:$PORT" --mode idle --count "$COUNT" --duration 20 >"$WORK/idle.json" &
FP=$!
sleep 12
measure "$COUNT idle connections"
wait "$FP"
echo "    flood: $(cat "$WORK/idle.json")"
sleep 2

# (the authenticated ones from 127.0.0.3: 127.0.0.1 is at its max_pending_per_peer)
for m in "slow-hello 20 127.0.0.1" "half-header 20 127.0.0.1" "idle-auth 4 127.0.0.3" \
         "cut-call 4 127.0.0.3" "stalled-copy 4 127.0.0.3"; do
    set -- $m
    $FLOOD --server "127.0.0.1:$PORT" --mode "$1" --count "$2" --duration 20 --source "$3" \
        --tenant mallory --token mallory-secret >"$WORK/$1.json" &
    SP+=($!)
done
sleep 8
measure "slowloris mix (8 s in)"
for p in "${SP[@]}"; do wait "$p"; done
for m in slow-hello half-header idle-auth cut-call stalled-copy; do echo "    $(cat "$WORK/$m.json")"; done
sleep 2
measure "after the attacks"
echo "    log lines: $(wc -l <"$WORK/server.log")"
