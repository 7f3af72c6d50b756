#!/bin/bash
# Fair shares between sessions (issue 30): four sessions of one tenant saturate the GPU at once
# for 10 s (tenant_load saturate: 1 ms kernels on every SM, one batch queued behind the running
# one); each must get within 15% of the sessions' mean rate, and together at least 90% of one
# session's rate alone (handovers cost little). Also reported: the GPU seconds the gate measured
# per session. Usage: tests/gpu/tenant_sessions.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
SECS=${TENANT_SESSIONS_SECS:-10}
start_tenant_server sessions '[tenant team]
token = team'
env $(tenant_env team team) "$LOAD" saturate 3 >"$LOGS/sessions.alone" 2>&1
P=()
for i in 1 2 3 4; do
    env $(tenant_env team team) "$LOAD" saturate "$SECS" >"$LOGS/sessions.$i" 2>&1 &
    P+=("$!")
    TPIDS+=("$!")
done
sleep $((SECS / 2))
gate=$(status "' '.join('%.2f' % x['gpu_seconds_total'] for x in s['sessions'])")
rc=0
for p in "${P[@]}"; do wait "$p" || rc=1; done
alone=$(field rate "$LOGS/sessions.alone")
rates=$(for i in 1 2 3 4; do field rate "$LOGS/sessions.$i"; done | tr '\n' ' ')
if [ $rc -ne 0 ] || [ -z "$alone" ] || [ "$(echo $rates | wc -w)" != 4 ]; then
    echo "FAIL a load failed: $(tail -2 "$LOGS"/sessions.[1-4] | tr '\n' ' ')"
    exit 1
fi
python3 - "$alone" $rates <<PY
import sys
alone, r = float(sys.argv[1]), [float(x) for x in sys.argv[2:]]
mean = sum(r) / len(r)
worst = max(abs(x - mean) / mean for x in r)
agg = sum(r) / alone
print("alone %.0f kernels/s; four sessions of one tenant: %s kernels/s (sum %.2fx alone); gate GPU seconds at half time: $gate" % (alone, " ".join("%.0f" % x for x in r), agg))
ok = worst <= 0.15 and agg >= 0.9
print("%s four sessions of one tenant: each within %.0f%% of the mean (limit 15%%), together %.2fx one alone (at least 0.90)" % ("PASS" if ok else "FAIL", 100 * worst, agg))
sys.exit(0 if ok else 1)
PY
