#!/bin/bash
# The NVML shim end to end: gpu-server on the fake driver with a tenant quota, once with a host
# NVML (a fake one: utilization 37%/11%) and once without; test_nvml in a client process.
# A worker must never take rgpu's own shim for the host's NVML: third case.
# Usage: run_nvml.sh GPU_SERVER FAKECUDA FAKE_HOST_NVML TEST_NVML NVML_SHIM
set -u
SERVER=$1 FAKE=$2 HOST_NVML=$3 TEST=$4 SHIM=$5
WORK=$(mktemp -d)
SERVER_PID=
FAILS=0
stop() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; SERVER_PID=; }
trap 'stop; rm -rf "$WORK"' EXIT

run_case() { # name host_nvml test-arg
    local port
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    printf '[server]\nhost_nvml = %s\nmodule_cache = off\n[tenant nvml]\ntoken = t0k\nmem_quota = 256MiB\n' \
        "$2" >"$WORK/$1.conf"
    "$SERVER" --config "$WORK/$1.conf" --listen 127.0.0.1 --port "$port" --driver "$FAKE" \
        >"$WORK/$1.server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
        sleep 0.1
    done
    if RGPU_SERVER=127.0.0.1:$port RGPU_TENANT=nvml RGPU_TOKEN=t0k timeout 60 "$TEST" "$3" \
        >"$WORK/$1.out" 2>"$WORK/$1.err" &&
        [ "$(grep -c 'nvmlDeviceGetPowerUsage is not supported' "$WORK/$1.err")" = 1 ]; then
        echo "ok   $1"
    else
        echo "FAIL $1"; cat "$WORK/$1.out" "$WORK/$1.err" "$WORK/$1.server.log"
        FAILS=$((FAILS + 1))
    fi
    sleep 0.2 # the worker's last log lines
    stop
}

run_case with_host_nvml "$HOST_NVML" util
run_case without_host_nvml off noutil
run_case shim_as_host_nvml "$SHIM" noutil
if grep -q "is rgpu's NVML shim, not the GPU host's NVML" "$WORK/shim_as_host_nvml.server.log"; then
    echo "ok   the shim is refused as a host NVML"
else
    echo "FAIL the shim was not refused as a host NVML"; FAILS=$((FAILS + 1))
fi
[ "$FAILS" = 0 ] && echo "4 passed, 0 failed"
exit "$FAILS"
