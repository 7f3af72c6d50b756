#!/bin/bash
# Two tenants with weights 1:3 both saturating the GPU for 30 s: their GPU-time shares must be
# 25/75 within 5 percentage points. A share is measured two ways: the tenant's kernel rate
# beside the other divided by its rate alone (what the application got), and the GPU seconds
# the server's /status reports over the run (what the gate measured); the verdict uses the
# first. Usage: tests/gpu/tenant_share.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
SECS=${TENANT_SHARE_SECS:-30}
start_tenant_server share '[tenant light]
token = light
weight = 1
[tenant heavy]
token = heavy
weight = 3'
# Alone first: each tenant's rate with the GPU to itself.
env $(tenant_env light light) "$LOAD" saturate 5 >"$LOGS/share.light.alone" 2>&1
env $(tenant_env heavy heavy) "$LOAD" saturate 5 >"$LOGS/share.heavy.alone" 2>&1
l0=$(tenant_gpu_seconds light); h0=$(tenant_gpu_seconds heavy)
env $(tenant_env light light) "$LOAD" saturate "$SECS" >"$LOGS/share.light.out" 2>&1 &
L=$!
env $(tenant_env heavy heavy) "$LOAD" saturate "$SECS" >"$LOGS/share.heavy.out" 2>&1 &
H=$!
TPIDS+=("$L" "$H")
wait "$L"; rl=$?
wait "$H"; rh=$?
l1=$(tenant_gpu_seconds light); h1=$(tenant_gpu_seconds heavy)
la=$(field rate "$LOGS/share.light.alone"); ha=$(field rate "$LOGS/share.heavy.alone")
lr=$(field rate "$LOGS/share.light.out"); hr=$(field rate "$LOGS/share.heavy.out")
if [ $rl -ne 0 ] || [ $rh -ne 0 ] || [ -z "$la" ] || [ -z "$lr" ] || [ -z "$ha" ] || [ -z "$hr" ]; then
    echo "FAIL a load failed: light rc=$rl heavy rc=$rh: $(tail -2 "$LOGS/share.light.out" "$LOGS/share.heavy.out" | tr '\n' ' ')"
    exit 1
fi
sl=$(calc "100 * $lr / $la"); sh=$(calc "100 * $hr / $ha")
ml=$(calc "100 * ($l1 - $l0) / (($l1 - $l0) + ($h1 - $h0))"); mh=$(calc "100 - $ml")
echo "rates alone: light $la/s heavy $ha/s; together: light $lr/s heavy $hr/s"
echo "shares by rate: light $(printf %.1f "$sl")% heavy $(printf %.1f "$sh")%; by the server's GPU seconds: light $(printf %.1f "$ml")% heavy $(printf %.1f "$mh")%; GPU busy $(printf %.1f "$(calc "$sl + $sh")")%"
if within "$sl" 25 5 && within "$sh" 75 5; then
    echo "PASS weights 1:3: light $(printf %.1f "$sl")% heavy $(printf %.1f "$sh")% (target 25/75 +-5 pp; server measured $(printf %.1f "$ml")/$(printf %.1f "$mh"))"
else
    echo "FAIL weights 1:3: light $(printf %.1f "$sl")% heavy $(printf %.1f "$sh")% (target 25/75 +-5 pp; server measured $(printf %.1f "$ml")/$(printf %.1f "$mh"))"
    exit 1
fi
