#!/bin/bash
# Issue 29's two configurations in one call of at most ~9.5 minutes on nvidia-h100-x4:
# tests/gpu/dist.sh with 2 GPUs (GPUs 0 and 1; one server, and two "hosts" of one GPU each),
# then with 4 GPUs (one server of four; two "hosts" of two each, ranks 2+2: NVLink inside a
# "host", sockets over veth between them). Each run has its own budget (DIST_ALL_BUDGET_S, 250 s
# by default; the second gets what the first left over) and its steps in an order that puts
# first what that configuration is for; a step that would not fit is a SKIP row. Each run is
# bounded by `timeout` as well, so nothing can hang the call.
# Output: both tables on stdout; $OUT/dist2/ and $OUT/dist4/ (dist-table.md, dist-logs.tar.gz)
# and $OUT/dist-all.md (both tables).
# Usage (root, on the GPU host, from the bundle of tests/gpu/bundle.sh):
#   tests/gpu/dist_all.sh .bundle
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$ROOT/.bundle}
OUTD=${OUT:-/tmp/rgpu-dist-out}
EACH=${DIST_ALL_BUDGET_S:-250}
T0=$(date +%s)
mkdir -p "$OUTD/dist2" "$OUTD/dist4"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

run() { # ngpu budget port mport steps
    OUT=$OUTD/dist$1 DIST_BUDGET_S=$2 DIST_SLACK_S=10 DIST_PORT=$3 DIST_MPORT=$4 DIST_STEPS=$5 \
        timeout -k 10 $(($2 + 25)) "$ROOT/tests/gpu/dist.sh" "$B" "$1"
    echo "(dist.sh $1: exit $?, $(($(date +%s) - T0)) s so far)"
}
# 2 GPUs: the one-server rows first (every pattern; busbw and faults), then the two "hosts".
run 2 "$EACH" 7201 29600 "torch local faults busbw two vmm jaxdist"
LEFT=$((2 * EACH + 20 - ($(date +%s) - T0)))
[ "$LEFT" -gt "$EACH" ] && LEFT=$EACH
# 4 GPUs: the 2+2 placement first (NVLink inside a "host", the network between), then one
# server of four.
run 4 "$LEFT" 7211 29700 "two torch busbw jaxdist local faults vmm"
{
    cat "$OUTD/dist2/dist-table.md" 2>/dev/null || echo "(no 2-GPU table)"
    echo
    cat "$OUTD/dist4/dist-table.md" 2>/dev/null || echo "(no 4-GPU table)"
} >"$OUTD/dist-all.md"
echo
echo "==================== both tables ($(($(date +%s) - T0)) s) ===================="
cat "$OUTD/dist-all.md"
exit 0
