#!/bin/bash
# The benchmark table, on a GPU host, from the bundle (tests/gpu/bundle.sh): every benchmark
# natively, through rgpu over loopback TCP, and through rgpu across a veth pair between two
# network namespaces, plus the raw TCP ceiling on both paths; and once more over loopback
# with busy polling on both ends (lo-poll), and on both paths without data lanes, every copy on
# the session's one connection (lo-1conn, veth-1conn; the micro benchmarks only). The PyTorch
# models run natively both first and last, and native keeps the better figure of the two.
# Writes bench-results.md and bench-results.json (into $OUT when set) and prints the Markdown
# table last.
# Usage: bench/run.sh [BUNDLE_DIR] [quick]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
QUICK=${2:-}
DEPS=$B/deps
RES=${OUT:-/tmp}/bench
mkdir -p "$RES"
rm -f "$RES"/*.jsonl
IP="env LD_LIBRARY_PATH=$DEPS $B/bin/ip"
NS=rgpu-bench
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; $IP netns del $NS 2>/dev/null; }
trap cleanup EXIT

# mode: native | lo | veth. Runs "$@" with the matching library path and server.
run_mode() {
    local mode=$1; shift
    case $mode in
        native) LD_LIBRARY_PATH=$DEPS "$@" ;;
        lo) LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:7070 "$@" ;;
        veth) LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=10.88.0.2:7070 "$@" ;;
        lo-poll) LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:7072 RGPU_BUSY_POLL_US=100 "$@" ;;
        lo-1conn) LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:7070 RGPU_LANES=0 "$@" ;;
        veth-1conn) LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=10.88.0.2:7070 RGPU_LANES=0 "$@" ;;
    esac
}

LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 127.0.0.1 --port 7070 >"$RES/server-lo.log" 2>&1 &
PIDS+=($!)
LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 127.0.0.1 --port 7072 --busy-poll-us 100 \
    >"$RES/server-lo-poll.log" 2>&1 &
PIDS+=($!)
VETH=no
if $IP netns add $NS && $IP link add rb-c type veth peer name rb-s && $IP link set rb-s netns $NS &&
    $IP addr add 10.88.0.1/24 dev rb-c && $IP link set rb-c up &&
    $IP netns exec $NS $IP addr add 10.88.0.2/24 dev rb-s && $IP netns exec $NS $IP link set rb-s up &&
    $IP netns exec $NS $IP link set lo up; then
    $IP netns exec $NS env LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 10.88.0.2 --port 7070 \
        >"$RES/server-veth.log" 2>&1 &
    PIDS+=($!)
    $IP netns exec $NS env LD_LIBRARY_PATH=$DEPS "$B/bin/rgpu-bench-tcp" server 10.88.0.2:7071 &
    VETH=yes
fi
"$B/bin/rgpu-bench-tcp" server 127.0.0.1:7071 &
sleep 2
"$B/bin/rgpu-bench-tcp" client 127.0.0.1:7071 >"$RES/lo.jsonl"
grep tcp_ "$RES/lo.jsonl" >"$RES/lo-poll.jsonl"
grep tcp_ "$RES/lo.jsonl" >"$RES/lo-1conn.jsonl"
if [ $VETH = yes ]; then
    "$B/bin/rgpu-bench-tcp" client 10.88.0.2:7071 >"$RES/veth.jsonl"
    grep tcp_ "$RES/veth.jsonl" >"$RES/veth-1conn.jsonl"
fi

MODES="native lo"
[ $VETH = yes ] && MODES="native lo veth"
MODES="$MODES lo-poll lo-1conn"
[ $VETH = yes ] && MODES="$MODES veth-1conn"
# Each model in its own process, so that its memory rows and its worker are its own.
torch_models() {
    [ -n "$QUICK" ] && return
    for m in resnet50 gpt2_decode; do
        RGPU_CLIENT_NAME=torch-$m run_mode $1 python3 "$ROOT/bench/torch_models.py" $m \
            >>"$RES/$1.jsonl" 2>>"$RES/$1.err"
    done
}
for mode in $MODES; do
    echo "== $mode" >&2
    run_mode $mode "$B/bin/rgpu-bench-micro" >>"$RES/$mode.jsonl" 2>>"$RES/$mode.err"
    case $mode in
        *-1conn) ;; # without lanes only copies of 32 MiB and more change
        *) run_mode $mode "$B/bin/rgpu-bench-gemm" >>"$RES/$mode.jsonl" 2>>"$RES/$mode.err" ;;
    esac
    case $mode in native | lo | veth) torch_models $mode ;; esac
done
# The models once more natively, last: the host's own rate drifts between processes by 10-25%
# (ResNet-50 eager is bound by the host's launch rate), so native keeps the better of two runs.
echo "== native (PyTorch again)" >&2
torch_models native
# Worker host memory per client program (loopback server): its peak RSS and its pinned staging,
# one line per session: NAME PEAK_MiB STAGING_MiB.
awk '/session [0-9]+: client /{for(i=1;i<=NF;i++) if($i=="client") {k=$(i-1); sub(":","",k); name[k]=$(i+1)}}
     /worker peak RSS/{for(i=1;i<=NF;i++) if($i=="session") s=$(i+1); sub(":","",s);
        r=$0; sub(/.*worker peak RSS /,"",r); split(r,a," "); g=$0; sub(/.*pinned staging /,"",g);
        split(g,b," "); print name[s], a[1], b[1]}' "$RES/server-lo.log" >"$RES/worker_rss.txt"
python3 "$ROOT/bench/table.py" "$RES" $MODES
