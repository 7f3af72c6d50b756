#!/bin/bash
# Shared by tests/gpu/tenant_*.sh (sourced): a gpu-server with a tenants config, clients run as
# a tenant, /status read back. Each script prints what it measured and "PASS ..." or
# "FAIL ..." as its last line, and exits 0 only on PASS.
#   B=BUNDLE_DIR (default <repo>/.bundle), LOGS (default ${OUT:-/tmp}/rgpu-gpu-logs)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
LOGS=${LOGS:-${OUT:-/tmp}/rgpu-gpu-logs}
mkdir -p "$LOGS"
DEPS=$B/deps
LOAD=$B/bin/tenant_load
TPIDS=()
tenant_cleanup() { for p in "${TPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap tenant_cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# start_tenant_server NAME CONFIG_BODY: gpu-server on a free port with [server] metrics and the
# given tenant sections; sets TPORT, MPORT, TSERVER_PID; log in $LOGS/NAME.server.log
start_tenant_server() {
    TPORT=$(free_port)
    MPORT=$(free_port)
    printf '[server]\nmetrics_listen = 127.0.0.1:%s\n%s\n' "$MPORT" "$2" >"$LOGS/$1.conf"
    LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --config "$LOGS/$1.conf" --listen 127.0.0.1 \
        --port "$TPORT" --log-level info >"$LOGS/$1.server.log" 2>&1 &
    TSERVER_PID=$!
    TPIDS+=("$TSERVER_PID")
    for _ in $(seq 100); do
        grep -q "metrics on http" "$LOGS/$1.server.log" && return 0
        sleep 0.1
    done
    echo "FAIL gpu-server did not start: $(tail -3 "$LOGS/$1.server.log")"
    exit 1
}

# env $(tenant_env NAME TOKEN) CMD...: run CMD through rgpu as that tenant (started with &,
# $! is the client process itself: env execs it)
tenant_env() {
    echo "LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:$TPORT RGPU_TENANT=$1 RGPU_TOKEN=$2"
}
native() { LD_LIBRARY_PATH=$DEPS "$@"; }

# status EXPR: a Python expression over the server's /status JSON (as s)
status() {
    python3 -c 'import json,sys,urllib.request
s=json.load(urllib.request.urlopen(sys.argv[1]))
print(eval(sys.argv[2]))' "http://127.0.0.1:$MPORT/status" "$1"
}
# tenant_gpu_seconds NAME: GPU seconds its sessions have now
tenant_gpu_seconds() { status "sum(t['gpu_seconds_total'] for t in s['tenants'] if t['name']=='$1')"; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$2" | tail -1; } # field KEY FILE
calc() { python3 -c "print($1)"; }
within() { python3 -c "import sys; sys.exit(0 if abs(($1) - ($2)) <= ($3) else 1)"; } # a b tol
