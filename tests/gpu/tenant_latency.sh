#!/bin/bash
# A guaranteed tenant's latency-bound loop (small kernel + synchronize, 3000 iterations) alone,
# then beside a best-effort tenant saturating the GPU: its p99 must stay within 1.3x of alone.
# Also reports the best-effort tenant's rate before and after (it takes the idle GPU back).
# Usage: tests/gpu/tenant_latency.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
ITERS=${TENANT_LATENCY_ITERS:-3000}
start_tenant_server latency '[tenant interactive]
token = interactive
class = guaranteed
[tenant batch]
token = batch
class = best-effort'
env $(tenant_env interactive interactive) "$LOAD" latency "$ITERS" >"$LOGS/latency.alone" 2>&1
env $(tenant_env batch batch) "$LOAD" saturate 40 >"$LOGS/latency.batch.out" 2>&1 &
BE=$!
TPIDS+=("$BE")
sleep 3 # the best-effort tenant has the GPU to itself and its queue full
env $(tenant_env interactive interactive) "$LOAD" latency "$ITERS" >"$LOGS/latency.beside" 2>&1
rc=$?
held=$(status "sum(x['gate_held_seconds_total'] for x in s['sessions'] if x['tenant']=='batch')")
kill "$BE" 2>/dev/null
a=$(field p99_us "$LOGS/latency.alone"); b=$(field p99_us "$LOGS/latency.beside")
a50=$(field p50_us "$LOGS/latency.alone"); b50=$(field p50_us "$LOGS/latency.beside")
if [ $rc -ne 0 ] || [ -z "$a" ] || [ -z "$b" ]; then
    echo "FAIL the latency loop failed (rc=$rc): $(tail -2 "$LOGS/latency.beside" | tr '\n' ' ')"
    exit 1
fi
r=$(calc "$b / $a")
echo "guaranteed p50/p99 alone $a50/$a us; beside best effort $b50/$b us; best effort held $(printf %.1f "$held") s at its gate"
if python3 -c "import sys; sys.exit(0 if $r <= 1.3 else 1)"; then
    echo "PASS guaranteed p99 beside best effort: $b us vs $a us alone (x$(printf %.2f "$r"), limit 1.3)"
else
    echo "FAIL guaranteed p99 beside best effort: $b us vs $a us alone (x$(printf %.2f "$r"), limit 1.3)"
    exit 1
fi
