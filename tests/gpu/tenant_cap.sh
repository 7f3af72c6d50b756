#!/bin/bash
# A tenant capped at 20% alone on the GPU, saturating it for 30 s: its share (its kernel rate
# over the rate of an uncapped tenant alone) must be 20% within 2 percentage points (issue 30).
# Usage: tests/gpu/tenant_cap.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
SECS=${TENANT_CAP_SECS:-30}
start_tenant_server cap '[tenant free]
token = free
[tenant capped]
token = capped
cap = 20%'
env $(tenant_env free free) "$LOAD" saturate 5 >"$LOGS/cap.free.out" 2>&1
c0=$(tenant_gpu_seconds capped)
env $(tenant_env capped capped) "$LOAD" saturate "$SECS" >"$LOGS/cap.capped.out" 2>&1
rc=$?
c1=$(tenant_gpu_seconds capped)
fa=$(field rate "$LOGS/cap.free.out"); cr=$(field rate "$LOGS/cap.capped.out")
ct=$(field seconds "$LOGS/cap.capped.out")
if [ $rc -ne 0 ] || [ -z "$fa" ] || [ -z "$cr" ]; then
    echo "FAIL a load failed (rc=$rc): $(tail -2 "$LOGS/cap.capped.out" | tr '\n' ' ')"
    exit 1
fi
s=$(calc "100 * $cr / $fa"); m=$(calc "100 * ($c1 - $c0) / $ct")
echo "rate uncapped alone $fa/s, capped alone $cr/s; server-measured GPU time $(printf %.2f "$(calc "$c1 - $c0")") s in $ct s"
if within "$s" 20 2; then
    echo "PASS cap 20%: share $(printf %.1f "$s")% (target 20 +-2 pp; server measured $(printf %.1f "$m")%)"
else
    echo "FAIL cap 20%: share $(printf %.1f "$s")% (target 20 +-2 pp; server measured $(printf %.1f "$m")%)"
    exit 1
fi
