#!/bin/bash
# Several GPUs for one process (issue 18), on a GPU host, from the bundle (tests/gpu/bundle.sh):
#   two gpu-servers serving the same GPU (ports P and P+1) give one client two devices, so every
#   peer copy crosses servers; one gpu-server (P+2) gives the single-server case. Then:
#   1. cuda-samples simpleP2P, simpleMultiGPU, simpleMultiCopy, p2pBandwidthLatencyTest (from
#      the bundle's samples.tar.xz) natively, through rgpu on one server and on two: each must
#      end as natively (exit 0, or simpleP2P's waiver 2: P2P between the two devices is absent)
#      and print its own PASS / "Test passed" line where the native run does; then simpleMultiGPU
#      with RGPU_POOL of the two servers and RGPU_GPUS=2 (gpus = N), and the CI's vmm_two and
#      p2p_answers through the two servers on the real driver;
#   2. PyTorch model parallelism (torch_model_parallel.py): halves on cuda:0/cuda:1 through two
#      servers, both on cuda:0 natively; the losses must agree (rtol 1e-3);
#   3. bandwidth (bench/peer_bw.sh): rgpu-bench-peer (cross-server cuMemcpyPeer server to server
#      and relayed through the client with RGPU_PEER_DIRECT=0, and HtoD/DtoH of one hop) beside
#      the raw transport (rgpu-bench-tcp) on the same loopback, to $OUT/multigpu-bench.json and
#      a table in $OUT/multigpu-bench.md, peer rows with their ratio to raw TCP (copy both to
#      bench/results/).
# Prints a summary table last; exits non-zero when a row fails.
# Usage: tests/gpu/multigpu.sh [BUNDLE_DIR]   (MULTIGPU_PORT, default 7090)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
DEPS=$B/deps
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LOGS=${OUT:-/tmp}/rgpu-gpu-logs/multigpu
WORK=/tmp/rgpu-multigpu
P=${MULTIGPU_PORT:-7090}
TWO=127.0.0.1:$P,127.0.0.1:$((P + 1))
ONE=127.0.0.1:$((P + 2))
mkdir -p "$LOGS" "$WORK"
PIDS=()
ROWS=()
FAILED=0
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
row() {
    ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")")
    echo "$2 $1 $3"
    [ "$2" = FAIL ] && FAILED=1
    return 0
}
native() { LD_LIBRARY_PATH=$DEPS:$CUDA_HOME/lib64:$WORK/_lib "$@"; }
via() { # SERVERS cmd...: through rgpu
    local servers=$1
    shift
    LD_LIBRARY_PATH=$B/client:$DEPS:$CUDA_HOME/lib64:$WORK/_lib RGPU_SERVER=$servers "$@"
}
for port in $P $((P + 1)) $((P + 2)); do
    LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 127.0.0.1 --port "$port" --log-level info \
        >"$LOGS/server-$port.log" 2>&1 &
    PIDS+=($!)
done
sleep 2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# ---- 1. cuda-samples
if [ -f "$B/samples.tar.xz" ]; then
    rm -rf "$WORK/s" && mkdir -p "$WORK/s"
    tar -C "$WORK/s" -xJf "$B/samples.tar.xz" 2>/dev/null ||
        python3 -c 'import sys,tarfile; tarfile.open(sys.argv[1],"r:xz").extractall(sys.argv[2])' \
            "$B/samples.tar.xz" "$WORK/s"
    ln -sfn "$WORK/s/_lib" "$WORK/_lib"
fi
passed_line() { grep -qiE 'PASS|Test passed|Result = PASS' "$1"; }
sample() { # name
    local n=$1 d=$WORK/s/$1 l=$LOGS/$1 rn r1 r2 ok=1 why=
    if [ ! -x "$d/$n" ]; then
        row "sample_$n" SKIP "not in the bundle's samples.tar.xz"
        return
    fi
    (cd "$d" && native timeout 120 "./$n" >"$l.native" 2>&1); rn=$?
    (cd "$d" && via "$ONE" timeout 300 "./$n" >"$l.one" 2>&1); r1=$?
    (cd "$d" && via "$TWO" timeout 300 "./$n" >"$l.two" 2>&1); r2=$?
    [ "$r1" = "$rn" ] || { ok=0; why+="one server exit $r1 (native $rn); "; }
    case "$n:$r2" in
        simpleP2P:2 | *:0) ;; # simpleP2P waives: the two devices are not peers
        *) ok=0; why+="two servers exit $r2; " ;;
    esac
    if [ "$rn" = 0 ] && passed_line "$l.native"; then
        passed_line "$l.one" || { ok=0; why+="one server: no PASS line; "; }
        [ "$r2" = 0 ] && ! passed_line "$l.two" && { ok=0; why+="two servers: no PASS line; "; }
    fi
    if [ $ok = 1 ]; then
        row "sample_$n" PASS "native $rn, one server $r1, two servers $r2"
    else
        row "sample_$n" FAIL "$why$(tail -2 "$l.two" | tr '\n' ' ')"
    fi
}
for s in simpleP2P simpleMultiGPU simpleMultiCopy p2pBandwidthLatencyTest; do sample "$s"; done
# gpus = 2 from a pool of the two servers (each admits the job on its one GPU): simpleMultiGPU
# on the two devices the pool gives.
if [ -x "$WORK/s/simpleMultiGPU/simpleMultiGPU" ]; then
    (cd "$WORK/s/simpleMultiGPU" && LD_LIBRARY_PATH=$B/client:$DEPS:$CUDA_HOME/lib64:$WORK/_lib \
        RGPU_POOL=$TWO RGPU_GPUS=2 timeout 300 ./simpleMultiGPU >"$LOGS/gpus2.out" 2>&1); rc=$?
    # The sample prints no PASS line (its exit status says); its sum must be that of the run on
    # the two servers named one by one (the same split over two devices).
    sum=$(grep 'GPU sum' "$LOGS/gpus2.out")
    if [ $rc = 0 ] && grep -q "CUDA-capable device count: 2" "$LOGS/gpus2.out" && [ -n "$sum" ] &&
        grep -qF "$sum" "$LOGS/simpleMultiGPU.two"; then
        row pool_gpus2_simpleMultiGPU PASS "RGPU_POOL of two servers, RGPU_GPUS=2: 2 devices, exit 0, ${sum# *} as on two servers named"
    else
        row pool_gpus2_simpleMultiGPU FAIL "exit $rc: $(tail -2 "$LOGS/gpus2.out" | tr '\n' ' ')"
    fi
fi
# The CI's multigpu programs that hold on a real driver: VMM across the two servers (reservations
# kept apart, device 1's memory made, mapped and used on its server) and peer answers (no).
for p in "vmm_two" "p2p_answers 0"; do
    if [ -x "$B/bin/${p%% *}" ]; then
        via "$TWO" timeout 120 "$B/bin/"$p >"$LOGS/${p%% *}.out" 2>&1 &&
            row "ci_${p%% *}" PASS "two servers, real driver" ||
            row "ci_${p%% *}" FAIL "$(tail -2 "$LOGS/${p%% *}.out" | tr '\n' ' ')"
    fi
done

# ---- 2. PyTorch: two-device model parallelism, losses as on one local GPU
T=$ROOT/tests/gpu/torch_model_parallel.py
if native python3 -c 'import torch' 2>/dev/null; then
    native python3 "$T" --dev0 cuda:0 --dev1 cuda:0 --json >"$LOGS/mp.native" 2>"$LOGS/mp.native.err"; rn=$?
    via "$TWO" python3 "$T" --dev0 cuda:0 --dev1 cuda:1 --json >"$LOGS/mp.two" 2>"$LOGS/mp.two.err"; rr=$?
    if [ $rn -eq 0 ] && [ $rr -eq 0 ] &&
        msg=$(python3 "$ROOT/tests/gpu/torch_train.py" --compare "$LOGS/mp.native" "$LOGS/mp.two" --rtol 1e-3); then
        row torch_model_parallel PASS "${msg#PASS }"
    else
        row torch_model_parallel FAIL "exit native=$rn rgpu=$rr: ${msg:-$(tail -2 "$LOGS/mp.two.err" | tr '\n' ' ')}"
    fi
else
    row torch_model_parallel SKIP "no torch in python3"
fi

# ---- 3. bandwidth: cross-server copies beside the raw transport (bench/peer_bw.sh: both
# peer benches and rgpu-bench-tcp, every row in GB/s, peer rows as a ratio of raw TCP)
if CLIENT_LD_PATH=$B/client:$DEPS:$CUDA_HOME/lib64 RAW_LD_PATH=$DEPS PEER_BW_LOGS=$LOGS \
    PEER_BW_TCP_PORT=$((P + 9)) "$ROOT/bench/peer_bw.sh" "$B/bin" "$TWO" "${OUT:-/tmp}/multigpu-bench" \
    1 16 256 2>"$LOGS/peer_bw.err"; then
    row bench_peer PASS "$(grep -c '"bench"' "${OUT:-/tmp}/multigpu-bench.json") rows, raw TCP beside"
else
    row bench_peer FAIL "$(tail -3 "$LOGS/peer_bw.err" | tr '\n' ' ')"
fi
cat "${OUT:-/tmp}/multigpu-bench.md"

echo
echo "================ several GPUs for one process (issue 18) ================"
printf '%s\n' "${ROWS[@]}"
exit $FAILED
