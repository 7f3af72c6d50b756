#!/bin/bash
# Cross-server copy bandwidth beside the raw transport (issue 18): rgpu-bench-peer through the
# client with two servers (server to server, then relayed through the client with
# RGPU_PEER_DIRECT=0, rows renamed relay_*), and rgpu-bench-tcp (one TCP connection on
# loopback: the raw transport's ceiling) to OUT.json (JSON lines), then OUT.md: every row in
# GB/s (10^9 bytes/s; rgpu-bench-tcp reports GiB/s and its RTT in microseconds) and each peer
# row's ratio to the raw TCP send rate. tests/gpu/multigpu.sh runs it on the GPU host;
# tests/multigpu/bench_rows.sh runs it on the fake driver (the rows must be filled, the numbers
# mean nothing there).
# Usage: bench/peer_bw.sh BIN_DIR SERVERS OUT [MiB...]   (SERVERS as RGPU_SERVER: a,b)
# Env: CLIENT_LD_PATH (LD_LIBRARY_PATH of the client runs: rgpu's libcuda.so.1 first),
#      RAW_LD_PATH (of rgpu-bench-tcp), PEER_BW_TCP_PORT (default 7099), PEER_BW_LOGS (stderr
#      of each step, default /tmp).
# Exits non-zero, naming the step, when a step fails or a row is missing.
set -u
BIN=$1 SERVERS=$2 OUT=$3
shift 3
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(1 16 256)
LOGS=${PEER_BW_LOGS:-/tmp}
PORT=${PEER_BW_TCP_PORT:-7099}
FAILED=0
step_failed() { echo "peer_bw: $1 failed: $(tail -2 "$2" | tr '\n' ' ')" >&2; FAILED=1; }
client() { env LD_LIBRARY_PATH="${CLIENT_LD_PATH:-}" RGPU_SERVER="$SERVERS" "$@"; }

client timeout 300 "$BIN/rgpu-bench-peer" "${SIZES[@]}" >"$OUT.json" 2>"$LOGS/peer.err" ||
    step_failed "server-to-server copies" "$LOGS/peer.err"
client env RGPU_PEER_DIRECT=0 timeout 300 "$BIN/rgpu-bench-peer" "${SIZES[@]}" \
    >"$LOGS/peer_relay.out" 2>"$LOGS/peer_relay.err" ||
    step_failed "relayed copies" "$LOGS/peer_relay.err"
grep '"bench": "peer_' "$LOGS/peer_relay.out" | sed 's/"bench": "peer_/"bench": "relay_peer_/' >>"$OUT.json"

env LD_LIBRARY_PATH="${RAW_LD_PATH:-}" "$BIN/rgpu-bench-tcp" server "127.0.0.1:$PORT" \
    >"$LOGS/tcp_server.log" 2>&1 &
tcp_server=$!
sleep 1 # it serves the first connection only: no probing it
env LD_LIBRARY_PATH="${RAW_LD_PATH:-}" timeout 120 "$BIN/rgpu-bench-tcp" client "127.0.0.1:$PORT" \
    >>"$OUT.json" 2>"$LOGS/tcp.err" || step_failed "raw TCP ceiling" "$LOGS/tcp.err"
kill "$tcp_server" 2>/dev/null
wait "$tcp_server" 2>/dev/null

python3 - "$OUT.json" >"$OUT.md" <<'PY' || FAILED=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def gbps(r):  # every bandwidth in GB/s (10^9 bytes/s)
    if "GBps" in r:
        return r["GBps"]
    if r.get("unit") == "GiB/s":
        return r["value"] * (1 << 30) / 1e9
    return None
raw = {r["bench"]: gbps(r) for r in rows if r["bench"].startswith("tcp_")}
ceiling = raw.get("tcp_send")
print("| measurement | bytes | GB/s | of raw TCP send |\n|---|---|---|---|")
missing = []
for r in rows:
    name, g = r["bench"], gbps(r)
    if g is None and r.get("unit") == "us":
        print("| %s | | %.1f us | |" % (name, r["value"]))
        continue
    if g is None:
        missing.append(name)
        continue
    ratio = "%.2f" % (g / ceiling) if ceiling and "peer_" in name else ""
    print("| %s | %s | %.3f | %s |" % (name, r.get("bytes", ""), g, ratio))
need = ["peer_0_to_1", "peer_1_to_0", "relay_peer_0_to_1", "tcp_send", "tcp_recv", "tcp_rtt_median"]
missing += [n for n in need if n not in {r["bench"] for r in rows}]
if missing:
    sys.stderr.write("peer_bw: rows missing or without a number: %s\n" % ", ".join(missing))
    sys.exit(1)
PY
exit $FAILED
