#!/bin/bash
# The NCCL shim's CPU cost per collective call against native (bench/nccl_calls.c), one rank.
#   On a GPU host, from the bundle (tests/gpu/bundle.sh):  bench/nccl_calls.sh [BUNDLE_DIR]
#     natively (the host's NCCL: NCCL_DIR, else PyTorch's site-packages/nvidia/nccl/lib) and
#     through rgpu (a gpu-server on 127.0.0.1 whose workers load that same NCCL).
#   Without a GPU (checks that it runs; no native side):  bench/nccl_calls.sh --fake BUILD_DIR
# Prints one JSON line per side and the ratio of the call costs. BUSY_POLL_US=N: the server's
# busy_poll_us and the client's RGPU_BUSY_POLL_US (spin before blocking on a receive);
# RGPU_WORKER_STATS=1: the worker's per-op times in the server log (printed).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PORT=${PORT:-7079}
WORK=$(mktemp -d)
trap 'kill $SPID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
SPID=

if [ "${1:-}" = --fake ]; then
    BUILD=$(cd "$2" && pwd)
    BIN=$BUILD/bin CLIENT=$BUILD/lib SHIM=$BUILD/lib DEPS=
    export FAKENCCL_DRIVER=$BUILD/tests/fakecuda/libfakecuda.so
    NCCL_LIB=$BUILD/tests/fakenccl/libfakenccl.so
    DRIVER=(--driver "$FAKENCCL_DRIVER")
else
    B=$(cd "${1:-$ROOT/.bundle}" && pwd)
    BIN=$B/bin CLIENT=$B/client SHIM=$B/nccl DEPS=$B/deps
    NCCL_DIR=${NCCL_DIR:-$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")')}
    NCCL_LIB=$NCCL_DIR/libnccl.so.2
    DRIVER=()
    LD_LIBRARY_PATH=$NCCL_DIR:$DEPS "$BIN/rgpu-bench-nccl" >"$WORK/native.json" || exit 1
    echo "native: $(cat "$WORK/native.json")"
fi
printf '[server]\nnccl_library = %s\nbusy_poll_us = %s\n' "$NCCL_LIB" "${BUSY_POLL_US:-0}" >"$WORK/server.conf"
LD_LIBRARY_PATH=$DEPS "$BIN/gpu-server" --config "$WORK/server.conf" --listen 127.0.0.1 \
    --port "$PORT" "${DRIVER[@]}" >"$WORK/server.log" 2>&1 &
SPID=$!
sleep 1
LD_LIBRARY_PATH=$CLIENT:$DEPS LD_PRELOAD=$SHIM/libnccl.so.2 RGPU_SERVER=127.0.0.1:$PORT \
    RGPU_BUSY_POLL_US=${BUSY_POLL_US:-0} "$BIN/rgpu-bench-nccl" >"$WORK/rgpu.json" ||
    { cat "$WORK/server.log"; exit 1; }
echo "rgpu:   $(cat "$WORK/rgpu.json")"
if [ -n "${RGPU_WORKER_STATS:-}" ]; then
    sleep 0.5
    grep -i "stats\|NCCL_COLL\|STREAM_SYNC" "$WORK/server.log" | head -20
fi
[ -f "$WORK/native.json" ] && python3 - "$WORK/native.json" "$WORK/rgpu.json" <<'PY'
import json, sys
n, r = (json.load(open(p)) for p in sys.argv[1:3])
print("call cost rgpu/native: %.2fx (%.3f us vs %.3f us); async-error poll %.1f us vs %.2f us; "
      "8-byte all-reduce waited for %.1f us vs %.1f us"
      % (r["allreduce_call_us"] / n["allreduce_call_us"], r["allreduce_call_us"],
         n["allreduce_call_us"], r["async_error_poll_us"], n["async_error_poll_us"],
         r["waited_8b_us"], n["waited_8b_us"]))
PY
exit 0
