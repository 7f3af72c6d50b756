# Sourced by the RDMA end-to-end scripts (rdma_faults.sh, rdma_direct.sh) after they set BUILD:
# a work directory and a fake verbs directory removed at exit, the client and fake verbs on the
# library path, ok/fail counting into FAILS, and start_server against the fake driver.
SERVER=$BUILD/bin/gpu-server
FAKE=$BUILD/tests/fakecuda/libfakecuda.so
WORK=$(mktemp -d)
FAKEVERBS_DIR=$(mktemp -d /tmp/fakeverbs.XXXXXX)
export FAKEVERBS_DIR LD_LIBRARY_PATH=$BUILD/tests/fakeverbs/lib:$BUILD/lib
FAILS=0
PIDS=()

cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$WORK" "$FAKEVERBS_DIR"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }

# start_server NAME [ENV=VALUE...] -- [server flags] -> PORT, SERVER_PID; log in $WORK/NAME.log
start_server() {
    local name=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    PORT=$(free_port)
    env "${envs[@]}" "$SERVER" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
        --log-level info "$@" >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}
