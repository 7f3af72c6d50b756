#!/bin/bash
# bench/peer_bw.sh's rows on the fake driver (issue 18): two gpu-servers, rgpu-bench-peer
# through the client (server to server and relayed), rgpu-bench-tcp beside it. Every row must
# carry a number (on the GPU host the raw-TCP rows were empty: the table read only the peer
# bench's GBps field) and each peer row its ratio to the raw TCP send rate. Speeds on the fake
# driver mean nothing and are not checked.
# Usage: bench_rows.sh GPU_SERVER FAKECUDA LIB_DIR BIN_DIR PEER_BW_SH
set -u
SERVER=$1 FAKE=$2 LIBDIR=$3 BIN=$4 SCRIPT=$5
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$WORK"/*.err "$WORK"/out.md; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ports=()
for name in a b; do
    port=$(free_port)
    FAKECUDA_VA_BASE=7e0000000000 "$SERVER" --listen 127.0.0.1 --port "$port" --driver "$FAKE" \
        >"$WORK/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    ports+=("$port")
done
CLIENT_LD_PATH=$LIBDIR PEER_BW_LOGS=$WORK PEER_BW_TCP_PORT=$(free_port) \
    "$SCRIPT" "$BIN" "127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}" "$WORK/out" 1 4 2>"$WORK/script.err" ||
    fail "bench/peer_bw.sh: $(cat "$WORK/script.err")"
cat "$WORK/out.md"
num='[0-9]+\.[0-9]+'
for r in tcp_send tcp_recv tcp_send_hot tcp_recv_hot; do
    grep -Eq "^\| $r \| +\| $num \| +\|$" "$WORK/out.md" || fail "row $r has no GB/s"
done
grep -Eq "^\| tcp_rtt_median \| \| $num us" "$WORK/out.md" || fail "no TCP round trip"
for r in peer_0_to_1 peer_1_to_0 relay_peer_0_to_1 relay_peer_1_to_0; do
    [ "$(grep -Ec "^\| $r \| [0-9]+ \| $num \| $num \|$" "$WORK/out.md")" = 2 ] ||
        fail "row $r: not two sizes each with GB/s and a ratio to raw TCP"
done
echo "bench rows: PASS"
