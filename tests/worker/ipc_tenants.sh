#!/bin/bash
# CUDA IPC and tenants end to end on the fake driver: the real client (tests/integration/ipc,
# exporter and importer in two processes, two sessions) against gpu-server with two tenants.
# Shows a handle opened by another session of the exporter's tenant (memory shared both ways,
# not charged to the importer's 8 MiB quota, which holds one 6 MiB buffer but not two), refused
# to the other tenant with a log line naming the exporter's tenant, refused once its session
# ended, forged bytes refused; and the server serving on afterwards.
# Usage: ipc_tenants.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
IPC=$BUILD/tests/integration/ipc
HOLD=$BUILD/tests/integration/hold_memory
export LD_LIBRARY_PATH=$BUILD/lib ASAN_OPTIONS=detect_leaks=0

ended_sessions() { grep -c 'freed [0-9]* allocation' "$WORK/server.log"; }

PORT=$(free_port)
cat >"$WORK/server.conf" <<EOF
[tenant alpha]
token = alpha-secret
mem_quota = 8MiB
max_sessions = 2
[tenant gamma]
token = gamma-secret
mem_quota = 8MiB
EOF
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    --log-level info >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done

# alpha to alpha: shared both ways; the importer allocates 6 MiB beside the opened 6 MiB.
IPC_IMPORT_TENANT=alpha IPC_IMPORT_TOKEN=alpha-secret as alpha alpha-secret "$IPC" \
    >"$WORK/same.out" 2>&1
check "alpha opens alpha's memory and event, uncharged; forged bytes refused (exit $?)" \
    grep -q '^PASS' "$WORK/same.out"
check "... the forged bytes were logged by the server" \
    grep -q "refused to open a CUDA IPC memory handle that no live session of this server exported" "$WORK/server.log"

# alpha to gamma: refused, logged with the exporter's tenant, alpha's memory untouched.
IPC_EXPECT=refused IPC_IMPORT_TENANT=gamma IPC_IMPORT_TOKEN=gamma-secret \
    as alpha alpha-secret "$IPC" >"$WORK/cross.out" 2>&1
check "gamma cannot open alpha's memory or event: INVALID_VALUE (exit $?)" \
    grep -q '^PASS' "$WORK/cross.out"
check "... logged naming alpha, for the memory and the event" \
    test "$(grep -c "tenant=gamma .*refused to open a CUDA IPC \(memory\|event\) handle exported by tenant 'alpha'" "$WORK/server.log")" = 2

# A handle outlives nothing: once the exporting session ended, alpha cannot open it either.
before=$(ended_sessions)
as alpha alpha-secret "$IPC" export >"$WORK/handles.bin" 2>"$WORK/export.err"
for _ in $(seq 50); do [ "$(ended_sessions)" -gt "$before" ] && break; sleep 0.1; done
as alpha alpha-secret "$IPC" import refused <"$WORK/handles.bin" >"$WORK/stale.out" 2>&1
check "a handle of a session that ended is refused (exit $?)" \
    grep -q '^importer passed' "$WORK/stale.out"

as gamma gamma-secret "$HOLD" 4 0 >"$WORK/after.out" 2>&1
check "the server serves on (gamma holds 4 MiB and reads it back)" grep -q PASS "$WORK/after.out"
check "the server is still running" kill -0 "$SERVER_PID"

kill "$SERVER_PID"
wait "$SERVER_PID"
if [ $FAILS -ne 0 ]; then
    for f in "$WORK"/*.out; do echo "--- $f"; cat "$f"; done
    echo "--- server log"; tail -40 "$WORK/server.log"
fi
echo "$FAILS failure(s)"
exit $((FAILS != 0))
