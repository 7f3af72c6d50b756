#!/bin/bash
# The main job: build if needed, start gpu-server on 127.0.0.1, run a sample CUDA program through
# the rgpu client, and print what it computed and where it ran.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PORT=${PORT:-7070}

if [ ! -x "$BUILD/bin/gpu-server" ] || [ ! -f "$BUILD/lib/libcuda.so.1" ] ||
    [ ! -x "$BUILD/bin/rgpu-demo-app" ]; then
    echo "== building rgpu (first run; tools/test.sh installs missing packages and runs the tests)"
    cmake -S "$ROOT" -B "$BUILD" >/dev/null && cmake --build "$BUILD" -j "$(nproc)" >/dev/null ||
        { echo "build failed: run tools/test.sh to install the missing packages" >&2; exit 1; }
fi

echo "== starting gpu-server on 127.0.0.1:$PORT"
"$BUILD/bin/gpu-server" --listen 127.0.0.1 --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
sleep 1
if ! kill -0 $SERVER 2>/dev/null; then
    wait $SERVER
    cat <<MSG

gpu-server could not start here: it needs a host with an NVIDIA GPU and its driver
(libcuda.so.1). Run it on a GPU host:
    gpu-server --listen 0.0.0.0 --port 7070
and point this host's programs at it:
    RGPU_SERVER=<gpu-host>:7070 $BUILD/bin/rgpu run -- $BUILD/bin/rgpu-demo-app
MSG
    exit 1
fi
echo "== running a CUDA program through the rgpu client"
RGPU_SERVER=127.0.0.1:$PORT "$BUILD/bin/rgpu" run -- "$BUILD/bin/rgpu-demo-app"
