#!/bin/bash
# Two ranks of nccl_busbw on ONE gpu-server, one GPU each, on the fake driver (2 devices) and the
# fake NCCL (FAKENCCL_ASYNC=1: a call returns at once, as a real NCCL's does), with the workers'
# per-op times (RGPU_WORKER_STATS=1): where a collective's time goes in the worker when a job's
# ranks share a server. No GPU: the fake "device" (CPU copies) bounds the bandwidth printed; the
# worker's NCCL_COLL time per call is the figure of interest.
# Usage: bench/nccl_one_server_fake.sh BUILD_DIR [PORT]
set -u
B=$(cd "$1" && pwd)
PORT=${2:-7391}
W=$(mktemp -d)
export FAKENCCL_DRIVER=$B/tests/fakecuda/libfakecuda.so FAKENCCL_ASYNC=1 FAKECUDA_DEVICES=2
printf '[server]\nnccl_library = %s\n' "$B/tests/fakenccl/libfakenccl.so" >"$W/server.conf"
RGPU_WORKER_STATS=1 "$B/bin/gpu-server" --config "$W/server.conf" --listen 127.0.0.1 \
    --port "$PORT" --driver "$FAKENCCL_DRIVER" >"$W/server.log" 2>&1 &
S=$!
trap 'kill "$S" 2>/dev/null; rm -rf "$W"' EXIT
sleep 1
export LD_LIBRARY_PATH=$B/lib RGPU_SERVER=127.0.0.1:$PORT NCCL_BUSBW_MIN=4096 NCCL_BUSBW_STEP=16
export NCCL_BUSBW_REPS=3 NCCL_BUSBW_LAT=1
"$B/tests/nccl/nccl_busbw" 1 2 "$W/id" 1 20 >/dev/null 2>"$W/r1.err" &
R1=$!
"$B/tests/nccl/nccl_busbw" 0 2 "$W/id" 1 20 >"$W/r0.out" 2>"$W/r0.err"
wait "$R1"
kill "$S"
wait "$S" 2>/dev/null
cat "$W/r0.out"
grep -h "NCCL_COLL\|LAUNCH" "$W/server.log" | head -4
