#!/bin/bash
# The gpu-server that the per-program integration tests share (a ctest fixture):
#   fixture.sh start BUILD_DIR STATE_DIR   start it (fake driver; with RGPU_TEST_TRANSPORT=rdma
#                                          also offering RDMA on tests/fakeverbs); STATE_DIR
#                                          gets its port, pid, log and the clients' environment
#   fixture.sh stop STATE_DIR              stop it; over rdma, fail unless every session moved
#                                          to RDMA
set -u
case "$1" in
start)
    BUILD=$(cd "$2" && pwd) STATE=$3
    rm -rf "$STATE" && mkdir -p "$STATE"
    env=(LD_LIBRARY_PATH="$BUILD/lib")
    if [ "${RGPU_TEST_TRANSPORT:-tcp}" = rdma ]; then
        mkdir -p "$STATE/fakeverbs"
        env=(LD_LIBRARY_PATH="$BUILD/tests/fakeverbs/lib:$BUILD/lib" FAKEVERBS_DIR="$STATE/fakeverbs"
             RGPU_TRANSPORT=rdma)
    fi
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    env "${env[@]}" setsid "$BUILD/bin/gpu-server" --listen 127.0.0.1 --port "$port" \
        --driver "$BUILD/tests/fakecuda/libfakecuda.so" --log-level info \
        >"$STATE/server.log" 2>&1 </dev/null &
    echo $! >"$STATE/pid"
    printf '%s\n' "${env[@]}" "RGPU_SERVER=127.0.0.1:$port" >"$STATE/env"
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && exit 0
        sleep 0.1
    done
    echo "gpu-server did not start:"; cat "$STATE/server.log"; exit 1
    ;;
stop)
    STATE=$2
    [ -f "$STATE/pid" ] && kill -- -"$(cat "$STATE/pid")" 2>/dev/null
    rc=0
    if grep -q '^RGPU_TRANSPORT=rdma$' "$STATE/env" 2>/dev/null; then
        sessions=$(grep -c ': client .* pid ' "$STATE/server.log")
        moved=$(grep -c 'transport rdma' "$STATE/server.log")
        if [ "$sessions" -gt 0 ] && [ "$moved" = "$sessions" ]; then
            echo "rdma: all $sessions sessions moved to RDMA"
        else
            echo "FAIL rdma: $moved of $sessions sessions moved to RDMA"; rc=1
        fi
    fi
    exit $rc
    ;;
esac
echo "usage: fixture.sh start BUILD_DIR STATE_DIR | stop STATE_DIR" >&2
exit 2
