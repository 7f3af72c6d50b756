#!/bin/bash
# A guaranteed tenant's latency-bound loop (small kernel + synchronize, 3000 iterations) alone,
# then beside three best-effort tenants saturating the GPU: its p99 must stay within 1.2x of
# alone (issue 30). Also reports how long the best-effort tenants were held at their gates.
# Usage: tests/gpu/tenant_latency.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
ITERS=${TENANT_LATENCY_ITERS:-3000}
start_tenant_server latency '[tenant interactive]
token = interactive
class = guaranteed
[tenant batch1]
token = batch1
class = best-effort
[tenant batch2]
token = batch2
class = best-effort
[tenant batch3]
token = batch3
class = best-effort'
env $(tenant_env interactive interactive) "$LOAD" latency "$ITERS" >"$LOGS/latency.alone" 2>&1
BE=()
for b in batch1 batch2 batch3; do
    env $(tenant_env $b $b) "$LOAD" saturate 40 >"$LOGS/latency.$b.out" 2>&1 &
    BE+=("$!")
    TPIDS+=("$!")
done
sleep 3 # the best-effort tenants have the GPU to themselves and their queues full
env $(tenant_env interactive interactive) "$LOAD" latency "$ITERS" >"$LOGS/latency.beside" 2>&1
rc=$?
held=$(status "sum(x['gate_held_seconds_total'] for x in s['sessions'] if x['tenant'].startswith('batch'))")
kill "${BE[@]}" 2>/dev/null
a=$(field p99_us "$LOGS/latency.alone"); b=$(field p99_us "$LOGS/latency.beside")
a50=$(field p50_us "$LOGS/latency.alone"); b50=$(field p50_us "$LOGS/latency.beside")
if [ $rc -ne 0 ] || [ -z "$a" ] || [ -z "$b" ]; then
    echo "FAIL the latency loop failed (rc=$rc): $(tail -2 "$LOGS/latency.beside" | tr '\n' ' ')"
    exit 1
fi
r=$(calc "$b / $a")
grep -h "over 2x p50" "$LOGS/latency.alone" | sed 's/^/  alone: /'
grep -h "over 2x p50" "$LOGS/latency.beside" | sed 's/^/  beside: /'
grep -h "^slow iteration" "$LOGS/latency.beside" | head -12 | sed 's/^/  beside: /'
echo "guaranteed p50/p99 alone $a50/$a us; beside 3 saturating best-effort tenants $b50/$b us; best effort held $(printf %.1f "$held") s at their gates"
if python3 -c "import sys; sys.exit(0 if $r <= 1.2 else 1)"; then
    echo "PASS guaranteed p99 beside 3 best-effort tenants: $b us vs $a us alone (x$(printf %.2f "$r"), limit 1.2)"
else
    echo "FAIL guaranteed p99 beside 3 best-effort tenants: $b us vs $a us alone (x$(printf %.2f "$r"), limit 1.2)"
    exit 1
fi
