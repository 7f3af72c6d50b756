# Sourced by tests/gpu/nccl_one_rank.sh and nccl_two_gpu.sh (after they set B, the bundle):
# the host's NCCL (NCCL_DIR, else PyTorch's site-packages/nvidia/nccl/lib), a gpu-server whose
# workers load it, and native / rgpu runners (rgpu: the client first, the shim preloaded).
DEPS=$B/deps
LOGS=${OUT:-/tmp}/rgpu-nccl-logs
mkdir -p "$LOGS"
WORK=$(mktemp -d)
PIDS=()
FAILS=0
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
NCCL_DIR=${NCCL_DIR:-$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")')}
[ -f "$NCCL_DIR/libnccl.so.2" ] || { echo "no libnccl.so.2 in $NCCL_DIR (set NCCL_DIR)"; exit 1; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
native() { LD_LIBRARY_PATH=$NCCL_DIR:$DEPS "$@"; }
remote() { LD_LIBRARY_PATH=$B/client:$DEPS LD_PRELOAD=$B/nccl/libnccl.so.2 RGPU_SERVER=127.0.0.1:$PORT "$@"; }
start_server() { # extra config lines
    printf '[server]\nnccl_library = %s\n%s\n' "$NCCL_DIR/libnccl.so.2" "${1:-}" >"$WORK/server.conf"
    LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --config "$WORK/server.conf" --listen 127.0.0.1 \
        --port "$PORT" --log-level info >"$LOGS/server.log" 2>&1 &
    PIDS+=($!)
    sleep 2
}
NATIVE_VERSION=$(native python3 -c 'import torch; v = torch.cuda.nccl.version(); print(v[0] * 10000 + v[1] * 100 + v[2])' 2>/dev/null || echo "")
echo "NCCL: $NCCL_DIR (version ${NATIVE_VERSION:-unknown}); logs in $LOGS"
