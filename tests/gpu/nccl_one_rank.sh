#!/bin/bash
# NCCL through rgpu on one GPU (issue 19): a one-rank communicator runs every collective,
# grouped send/recv, split, PreMulSum and ncclMemAlloc with the right values, natively and
# through rgpu; torch.distributed (nccl backend, world size 1) trains a small DDP model with
# the native losses; the shim exports every name the host's NCCL does; the call-cost bench.
# Usage (GPU host, from the bundle of tests/gpu/bundle.sh): tests/gpu/nccl_one_rank.sh [BUNDLE]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
PORT=${PORT:-7081}
. "$ROOT/tests/gpu/nccl_lib.sh"

# 1. Every name the host's NCCL exports is exported by the shim (else PyTorch may fail to bind).
if command -v nm >/dev/null; then
    missing=$(comm -23 <(nm -D --defined-only "$NCCL_DIR/libnccl.so.2" | awk '{print $3}' | sort -u) \
                       <(nm -D --defined-only "$B/nccl/libnccl.so.2" | awk '{print $3}' | sort -u))
    if [ -z "$missing" ]; then ok "the shim exports every symbol of the host's NCCL"
    else fail "the shim lacks: $(echo $missing) (add them to nccl/nccl_api.txt)"; fi
else echo "skip symbol comparison: no nm on this host"; fi

# 2. One rank, every collective, natively and through rgpu.
start_server
if native "$B/bin/nccl_ranks" all 0 1 "$WORK/native.id" >"$LOGS/one_rank.native" 2>&1; then
    ok "one rank natively"; else fail "one rank natively"; cat "$LOGS/one_rank.native"; fi
if NCCL_RANKS_VERSION=$NATIVE_VERSION remote "$B/bin/nccl_ranks" all 0 1 "$WORK/rgpu.id" \
        >"$LOGS/one_rank.rgpu" 2>&1; then
    ok "one rank through rgpu (every collective, send/recv, split, PreMulSum, ncclMemAlloc)"
else fail "one rank through rgpu"; cat "$LOGS/one_rank.rgpu"; tail -20 "$LOGS/server.log"; fi

# 3. torch.distributed, nccl backend, world size 1: DDP losses equal to native.
T=$ROOT/tests/gpu/torch_ddp.py
native python3 "$T" --json >"$LOGS/ddp1.native" 2>"$LOGS/ddp1.native.err"; rn=$?
remote python3 "$T" --json >"$LOGS/ddp1.rgpu" 2>"$LOGS/ddp1.rgpu.err"; rr=$?
if [ $rn = 0 ] && [ $rr = 0 ] && msg=$(python3 "$T" --compare "$LOGS/ddp1.native" "$LOGS/ddp1.rgpu"); then
    ok "DDP world size 1: $msg"
else fail "DDP world size 1 (native $rn, rgpu $rr) ${msg:-}"; tail -5 "$LOGS"/ddp1.*.err; fi

# 4. The shim's CPU cost per collective call against native.
PORT=$((PORT + 1)) "$ROOT/bench/nccl_calls.sh" "$B" | tee "$LOGS/nccl_calls.txt"
echo "$FAILS failure(s)"
exit "$FAILS"
