# Sourced by the tenant end-to-end scripts (tenants_e2e.sh, ipc_tenants.sh) after they set BUILD:
# gpu-server and the fake driver, a work directory removed at exit (KEEP=1 keeps it), ok/fail/
# check counting into FAILS, a free port, a process's children, waiting for a log line, and running a client as a
# tenant against the server on $PORT.
SERVER=$BUILD/bin/gpu-server
FAKE=$BUILD/tests/fakecuda/libfakecuda.so
WORK=$(mktemp -d)
FAILS=0
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT

# The processes whose parent is $1 (from /proc: procps is not among CI's packages).
children() { awk -v p="$1" '$4 == p {print $1}' /proc/[0-9]*/stat 2>/dev/null; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { # description command...
    local what=$1; shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}
wait_for() { # file pattern
    for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "    '$2' not found in $1:"; sed 's/^/    /' "$1"; return 1
}
as() { # tenant token program args... (no leak check: some clients keep their buffers to the end)
    local t=$1 k=$2; shift 2
    ASAN_OPTIONS=detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT RGPU_TENANT=$t RGPU_TOKEN=$k "$@"
}
