#!/bin/bash
# The compute gate's cost per launch on a GPU host: N launch-bound request loops at once
# (tests/worker/share_load: one empty kernel, a synchronize, no think time; requests per
# second), natively (the driver time-slices the contexts) and through each gpu-server build
# given, rounds interleaved. Prints one line per run: mode, round, the sessions' requests.
# Usage: bench/gate_launch.sh DIR N SECS ROUNDS SERVER...   DIR holds share_load, client/
#        (rgpu's libcuda.so.1) and deps/; each SERVER a gpu-server binary (time-sliced);
#        GATE_SERVER_ARGS: more arguments for them (--driver for the fake driver).
set -u
DIR=$1 N=$2 SECS=$3 ROUNDS=$4
shift 4
export NCCL_NVLS_ENABLE=0
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
loops() { # label env...: N loops at once; prints their counts
    local label=$1 pids=() out
    shift
    out=$(mktemp -d)
    for i in $(seq "$N"); do
        env "$@" "$DIR/share_load" "$SECS" 1 0 1 >"$out/$i" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    echo "$label $(cat "$out"/* | sed -n 's/^requests=//p' | tr '\n' ' ')"
    grep -hv "^requests=" "$out"/* | head -3
    rm -rf "$out"
}
for r in $(seq "$ROUNDS"); do
    loops "native r$r" LD_LIBRARY_PATH="$DIR/deps"
    for srv in "$@"; do
        p=$(port)
        LD_LIBRARY_PATH="$DIR/deps" "$srv" --listen 127.0.0.1 --port "$p" ${GATE_SERVER_ARGS:-} >"/tmp/gate-$r-$(basename "$srv").log" 2>&1 &
        sp=$!
        for _ in $(seq 100); do grep -q "listening on" "/tmp/gate-$r-$(basename "$srv").log" && break; sleep 0.1; done
        loops "$(basename "$srv") r$r" LD_LIBRARY_PATH="$DIR/client:$DIR/deps" RGPU_SERVER=127.0.0.1:$p
        kill "$sp"
        wait "$sp" 2>/dev/null
        grep -h "measured launches" "/tmp/gate-$r-$(basename "$srv").log" | head -2 | sed 's/^.*compute gate/  gate/'
    done
done
