#!/bin/bash
# Tenants end to end on the fake driver (a 5 GiB device): the real client (hold_memory) against
# gpu-server with three tenants. Shows admission (a session-limit breach and an over-quota
# admission refused with their reasons, neither leaving anything allocated), a wrong token,
# the quota enforced in a session, /metrics and /status, a SIGHUP reload that raises a limit
# without dropping the running sessions, and a killed client's slot and reservation freed.
# Usage: tenants_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
HOLD=$BUILD/tests/integration/hold_memory
LOAD=$BUILD/tests/worker/share_load
export LD_LIBRARY_PATH=$BUILD/lib FAKECUDA_MEM_MB=5120

# get PATH -> the body of http://127.0.0.1:$MPORT/PATH
get() { python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://127.0.0.1:$MPORT/$1"; }
# status EXPR: evaluate a Python expression over the /status JSON (as s)
status() { get status | python3 -c 'import json,sys;s=json.load(sys.stdin);print(eval(sys.argv[1]))' "$1"; }

PORT=$(free_port)
MPORT=$(free_port)
write_config() { # alpha's max_sessions
    cat >"$WORK/server.conf" <<EOF
[server]
metrics_listen = 127.0.0.1:$MPORT
[tenant alpha]
token_sha256 = $("$SERVER" --hash-token alpha-secret)
mem_quota = 1GiB
max_sessions = $1
weight = 3
[tenant beta]
token = beta-secret
mem_quota = 3GiB
class = best-effort
cap = 50%
[tenant gamma]
token = gamma-secret
mem_quota = 2GiB
EOF
}
write_config 1
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for "$WORK/server.log" "metrics on http" || exit 1

# alpha holds 64 MiB; a second alpha session breaches max_sessions = 1.
as alpha alpha-secret "$HOLD" 64 600 >"$WORK/alpha1.out" 2>&1 & # until SIGUSR1 (below)
A1=$!
PIDS+=("$A1")
wait_for "$WORK/alpha1.out" ready || exit 1
as alpha alpha-secret "$HOLD" 64 0 >"$WORK/alpha2.out" 2>&1
check "session limit refused with the reason (exit $?)" \
    grep -q "refused the session: session limit reached: tenant 'alpha' already has 1 session(s) (max_sessions = 1)" "$WORK/alpha2.out"

# beta reserves 3 GiB (alpha 1 GiB): 1 GiB of the card is left; gamma's 2 GiB are refused.
# (started directly, not through a shell function, so that $! is the client process itself)
ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT RGPU_TENANT=beta RGPU_TOKEN=beta-secret \
    "$HOLD" 64 30 \
    >"$WORK/beta.out" 2>&1 &
B=$!
PIDS+=("$B")
wait_for "$WORK/beta.out" ready || exit 1
as gamma gamma-secret "$HOLD" 16 0 >"$WORK/gamma.out" 2>&1
check "over-quota admission refused with the reason" \
    grep -q "refused the session: insufficient GPU memory: tenant 'gamma' needs a 2.00 GiB quota but GPU 0 has 1.00 GiB left (5.00 GiB total, 4.00 GiB reserved by 2 session(s))" "$WORK/gamma.out"
RGPU_MEM_QUOTA=512MiB as gamma gamma-secret "$HOLD" 16 0 >"$WORK/gamma-small.out" 2>&1
check "a client asking for less (RGPU_MEM_QUOTA=512MiB) is admitted in what is left" \
    grep -q PASS "$WORK/gamma-small.out"
as alpha wrong-secret "$HOLD" 16 0 >"$WORK/badtoken.out" 2>&1
check "wrong token refused with the reason" \
    grep -q "refused the session: authentication failed: unknown tenant or wrong token" "$WORK/badtoken.out"
# An unknown tenant gets the same answer (a peer without a token learns no tenant's name); the
# supervisor's log tells them apart, before any worker exists.
as nosuch wrong-secret "$HOLD" 16 0 >"$WORK/badtenant.out" 2>&1
check "unknown tenant refused with the same text" \
    grep -q "refused the session: authentication failed: unknown tenant or wrong token" "$WORK/badtenant.out"
check "the log tells wrong token from unknown tenant" \
    test "$(grep -c "gpu-server warn: refused the hello of 127.0.0.1:[0-9]* (client .*): tenant 'alpha': authentication failed: wrong token" "$WORK/server.log")" = 1 -a \
         "$(grep -c "gpu-server warn: refused the hello of 127.0.0.1:[0-9]* (client .*): tenant 'nosuch': authentication failed: unknown tenant" "$WORK/server.log")" = 1
# Refused sessions allocated nothing: their workers never made a context and freed nothing.
check "refused sessions left nothing allocated" \
    test "$(grep -c 'refused:' "$WORK/server.log")" = 2 -a "$(grep -c 'freed ' "$WORK/server.log")" = 1
check "log lines name tenant and session" \
    grep -q "tenant=gamma session [0-9]* warn: .*refused: insufficient GPU memory" "$WORK/server.log"

# /status and /metrics while alpha and beta run.
check "/status: two sessions, 4 GiB reserved, tenant settings" \
    test "$(status 'len(s["sessions"]), sum(x["memory_quota_bytes"] for x in s["sessions"]) >> 30, [(t["name"], t["weight"], t["class"], t["cap"], t["max_sessions"]) for t in s["tenants"]]')" = \
    "(2, 4, [('alpha', 3, 'guaranteed', 0.0, 1), ('beta', 1, 'best-effort', 0.5, 0), ('gamma', 1, 'guaranteed', 0.0, 0)])"
get metrics >"$WORK/metrics.txt"
check "/metrics: per-tenant sessions and memory, per-GPU reservation" \
    grep -q '^rgpu_tenant_sessions{tenant="alpha"} 1$' "$WORK/metrics.txt"
grep -q '^rgpu_tenant_memory_used_bytes{tenant="beta"} 67108864$' "$WORK/metrics.txt" ||
    fail "beta's 64 MiB in /metrics: $(grep memory_used "$WORK/metrics.txt")"
grep -q '^rgpu_gpu_memory_reserved_bytes{gpu="0"} 4294967296$' "$WORK/metrics.txt" ||
    fail "4 GiB reserved in /metrics: $(grep reserved "$WORK/metrics.txt")"
grep -q '^rgpu_session_calls_total{tenant="alpha",session="[0-9]*"} [1-9]' "$WORK/metrics.txt" ||
    fail "alpha's calls in /metrics"

# SIGHUP raises alpha's limit to 2: a second alpha session starts beside the first, which keeps
# running; inside it, the 1 GiB quota holds.
write_config 2
kill -HUP "$SERVER_PID"
wait_for "$WORK/server.log" "SIGHUP: reloaded" || fail "reload"
as alpha alpha-secret "$HOLD" 2048 0 >"$WORK/alpha3.out" 2>&1
check "after SIGHUP a second alpha session is admitted; over its 1 GiB quota: out of memory" \
    grep -q "cuMemAlloc(&d, len) failed: CUDA_ERROR_OUT_OF_MEMORY" "$WORK/alpha3.out"
check "... while the first alpha session still ran" kill -0 "$A1"
H1=$(children "$A1") # hold_memory, under the subshell of the background `as`
kill -USR1 "${H1:-$A1}"
wait "$A1"
check "alpha's first session went on through the reload (exit $?)" grep -q PASS "$WORK/alpha1.out"
check "/status shows the reloaded limit" test "$(status 's["tenants"][0]["max_sessions"]')" = 2

# A killed client: its worker ends, the supervisor frees its slot and reservation.
kill -9 "$B"
wait "$B" 2>/dev/null
for _ in $(seq 50); do [ "$(status 'len(s["sessions"])')" = 0 ] && break; sleep 0.1; done
check "killed client's slot and reservation freed ($(status '[x["tenant"] for x in s["sessions"]]'))" test "$(status 'len(s["sessions"])')" = 0
as gamma gamma-secret "$HOLD" 16 0 >"$WORK/gamma2.out" 2>&1
check "gamma admitted once the memory is free" grep -q PASS "$WORK/gamma2.out"

# The compute gate: alpha (weight 3) and gamma (weight 1) both saturate for 3 s with the fake's
# 2 ms sleep_us kernels (a matmul's time on the CPU swung with the host's load), one worker at a
# time as the gate allows, so launches divide about 3:1.
as alpha alpha-secret "$LOAD" 3 2000 >"$WORK/load.alpha" 2>&1 &
LA=$!
as gamma gamma-secret "$LOAD" 3 2000 >"$WORK/load.gamma" 2>&1
wait "$LA"
la=$(sed -n 's/launches=//p' "$WORK/load.alpha"); lg=$(sed -n 's/launches=//p' "$WORK/load.gamma")
share=$(python3 -c "print(round(100 * ${la:-0} / max(1, ${la:-0} + ${lg:-0})))")
check "weights 3:1 divide the launches: alpha ${la:-?}, gamma ${lg:-?} (${share}% for alpha, 75 +-10)" \
    test "$share" -ge 65 -a "$share" -le 85
get metrics >"$WORK/metrics2.txt"
grep -q '^rgpu_tenant_gpu_seconds_total{tenant="alpha"} [0-9.e-]*[1-9]' "$WORK/metrics2.txt" &&
    grep -q '^rgpu_tenant_gate_held_seconds_total{tenant="gamma"} [0-9.e-]*[1-9]' "$WORK/metrics2.txt" ||
    fail "GPU seconds and gate time in /metrics: $(grep -E 'gpu_seconds|held' "$WORK/metrics2.txt" | head -4)"

kill "$SERVER_PID"
wait "$SERVER_PID"
if [ $FAILS -ne 0 ]; then
    echo "--- server log"; tail -40 "$WORK/server.log"
fi
echo "$FAILS failure(s)"
exit $((FAILS != 0))
