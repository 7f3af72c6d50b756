#!/bin/bash
# Pools on a GPU host (issue 16), from the bundle made by tests/gpu/bundle.sh: three gpu-servers
# on separate ports of this host's GPU(s) form one pool in a client config (tenant "pool":
# 1 GiB quota, room for 10 sessions per server). Shows:
#   1. placement: three jobs by spread land on three servers, by pack on one (rgpu status of each)
#   2. one server full and one stopped: a PyTorch job lands on the third and logs why
#   3. 20 clients started at once against two servers with room for 10 each: all start, 10/10
#   4. rgpu status, rgpu top --once and rgpu ping of the pool
# Prints a summary table last; exits 0 only when every row passed.
# Usage: tests/gpu/pool.sh [BUNDLE_DIR]   (logs in ${OUT:-/tmp}/rgpu-gpu-logs/pool)
#   RGPU_POOL_DRIVER=path: the servers' driver library (a dry run on tests/fakecuda without a GPU)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
LOGS=${OUT:-/tmp}/rgpu-gpu-logs/pool
mkdir -p "$LOGS"
DEPS=$B/deps
declare -a ROWS
PIDS=()
HOLDERS=()
FAILS=0
cleanup() { for p in "${PIDS[@]}" "${HOLDERS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

row() { # name PASS|FAIL detail
    ROWS+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")")
    echo "$2 $1: $3"
    [ "$2" = PASS ] || FAILS=$((FAILS + 1))
}
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
export RGPU_TENANT=pool RGPU_TOKEN=pool-secret RGPU_LIBDIR=$B/client RGPU_TRANSPORT=tcp
unset RGPU_SERVER RGPU_POOL RGPU_POLICY RGPU_MEM_QUOTA
export HOME=$LOGS # no personal ~/.config/rgpu/client.conf
rgpu() { LD_LIBRARY_PATH=$DEPS "$B/bin/rgpu" "$@"; }

cat >"$LOGS/server.conf" <<CONF
[tenant pool]
token = pool-secret
mem_quota = 1GiB
max_sessions = 10
CONF
start_server() { # NAME PORT
    [ -f "$LOGS/server-$1.log" ] && mv "$LOGS/server-$1.log" "$LOGS/server-$1.before-restart.log"
    LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --config "$LOGS/server.conf" --listen 127.0.0.1 \
        --port "$2" --name "$1" --log-level info ${RGPU_POOL_DRIVER:+--driver "$RGPU_POOL_DRIVER"} >"$LOGS/server-$1.log" 2>&1 &
    eval "PID_$1=$!"
    PIDS+=($!)
    for _ in $(seq 100); do
        grep -q "listening on" "$LOGS/server-$1.log" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "gpu-server $1 did not start: $(tail -3 "$LOGS/server-$1.log")"
    return 1
}
PA=$(free_port) PB=$(free_port) PC=$(free_port)
A=127.0.0.1:$PA B_=127.0.0.1:$PB C=127.0.0.1:$PC
start_server A "$PA" && start_server B "$PB" && start_server C "$PC" || exit 1
cat >"$LOGS/client.conf" <<CONF
[client]
pool = $A, $B_, $C
tenant = pool
token_file = $LOGS/token
CONF
echo pool-secret >"$LOGS/token"
chmod 600 "$LOGS/token"
export RGPU_CONFIG=$LOGS/client.conf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null

# sessions [POOL] -> the tenant's sessions per server, in pool order ("1 0 2")
sessions() {
    rgpu status --json ${1:+--pool "$1"} | python3 -c \
        'import json,sys;print(" ".join(str(s.get("tenant_sessions","-")) for s in json.load(sys.stdin)["servers"]))'
}
# hold NAME ENV...: a client holding 64 MiB until killed, started through the pool
hold() {
    local name=$1; shift
    env LD_LIBRARY_PATH="$B/client:$DEPS" RGPU_LOG_LEVEL=info "$@" "$B/bin/hold_memory" 64 600 \
        >"$LOGS/$name.out" 2>&1 &
    HOLDERS+=($!)
}
ready_count() { cat "$LOGS/$1"*.out 2>/dev/null | grep -c '^ready'; } # PREFIX
wait_ready() { # COUNT PREFIX: until COUNT clients NAMEd PREFIX* said ready (90 s at most)
    for _ in $(seq 900); do
        [ "$(ready_count "$2")" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
release() {
    for p in "${HOLDERS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    HOLDERS=()
    for _ in $(seq 200); do [ "$(sessions)" = "0 0 0" ] && return; sleep 0.1; done
    echo "sessions left: $(sessions)"
}

# ---- 1. placement ----------------------------------------------------------------------------
rgpu status >"$LOGS/status-empty.txt" 2>&1
rc=$?
cat "$LOGS/status-empty.txt"
row "rgpu status, empty pool" "$([ $rc = 0 ] && [ "$(sessions)" = "0 0 0" ] && echo PASS || echo FAIL)" \
    "exit $rc, sessions $(sessions)"
for i in 1 2 3; do hold spread$i RGPU_POLICY=spread; wait_ready "$i" spread; done
got=$(sessions)
rgpu status >"$LOGS/status-spread.txt" 2>&1
echo "== rgpu status after three jobs placed by spread"; cat "$LOGS/status-spread.txt"
row "spread: 3 jobs on 3 servers" "$([ "$got" = "1 1 1" ] && echo PASS || echo FAIL)" "sessions $got"
release
for i in 1 2 3; do hold pack$i RGPU_POLICY=pack; wait_ready "$i" pack; done
got=$(sessions)
rgpu status >"$LOGS/status-pack.txt" 2>&1
echo "== rgpu status after three jobs placed by pack"; cat "$LOGS/status-pack.txt"
row "pack: 3 jobs on 1 server" "$([ "$(echo "$got" | tr ' ' '\n' | sort -n | tr '\n' ' ')" = "0 0 3 " ] && echo PASS || echo FAIL)" "sessions $got"
release

# ---- 2. one server full, one stopped: PyTorch lands on the third -----------------------------
for i in $(seq 10); do hold fill$i RGPU_SERVER="$A"; done
wait_ready 10 fill
kill "$PID_B"; wait "$PID_B" 2>/dev/null
JOB=(python3 "$ROOT/tests/gpu/torch_smoke.py")
[ -n "${RGPU_POOL_DRIVER:-}" ] && JOB=("$B/bin/hold_memory" 16 0) # the dry run has no PyTorch
env LD_LIBRARY_PATH="$B/client:$DEPS" RGPU_LOG_LEVEL=info RGPU_POLICY=first "${JOB[@]}" \
    >"$LOGS/torch.out" 2>"$LOGS/torch.err"
rc=$?
line=$(cat "$LOGS/torch.err" "$LOGS/torch.out" | grep -o "pool: job placed on .*" | head -1)
echo "== the PyTorch job's log line"; echo "$line"
ok=FAIL
grep -q PASS "$LOGS/torch.out" && echo "$line" | grep -q "placed on $C .*passed over: $A (session limit reached.*$B_ (unreachable" && ok=PASS
row "full + stopped: PyTorch lands on the third" "$ok" "exit $rc; ${line:0:160}"
start_server B "$PB" || row "gpu-server B restarted" FAIL "$(tail -1 "$LOGS/server-B.log")"
release

# ---- 3. 20 clients at once against two servers with room for 10 each --------------------------
for i in $(seq 20); do hold many$i RGPU_POOL="$A,$B_"; done
wait_ready 20 many
ready=$(ready_count many)
got=$(sessions "$A,$B_")
moved=$(grep -l "passed over" "$LOGS"/many*.out | wc -l)
rgpu status --pool "$A,$B_" >"$LOGS/status-many.txt" 2>&1
echo "== rgpu status with 20 clients"; cat "$LOGS/status-many.txt"
row "20 clients at once: all start, split 10/10" "$([ "$ready" = 20 ] && [ "$got" = "10 10" ] && echo PASS || echo FAIL)" \
    "$ready ready, sessions $got, $moved moved on after a refusal"
grep -h " error: \| failed: " "$LOGS"/many*.out | head -3

# ---- 4. status, top, ping ----------------------------------------------------------------------
echo "== rgpu top --once (20 sessions on A and B)"
rgpu top --once; rc=$?
row "rgpu top --once" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "exit $rc"
release
echo "== rgpu ping"
rgpu ping --count 200 --bandwidth | tee "$LOGS/ping.txt"; rc=${PIPESTATUS[0]}
row "rgpu ping" "$([ $rc = 0 ] && [ "$(grep -c 'GiB/s' "$LOGS/ping.txt")" -ge 3 ] && echo PASS || echo FAIL)" \
    "$(grep "^$A" "$LOGS/ping.txt" | tr -s ' ')"
rgpu ping --count 200 --bandwidth --json >"$LOGS/ping.json"
kill "$PID_C"; wait "$PID_C" 2>/dev/null
rgpu status --pool "127.0.0.1:$(free_port)" >/dev/null 2>&1; rc=$?
row "rgpu status exits 1 when no server answers" "$([ $rc = 1 ] && echo PASS || echo FAIL)" "exit $rc"

echo
echo "== summary (logs in $LOGS)"
printf '%s\n' "${ROWS[@]}"
[ "$FAILS" = 0 ]
