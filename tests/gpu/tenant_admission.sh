#!/bin/bash
# Admission on the GPU: with tenant "big" holding a 60 GiB reservation, a second "big" session
# (max_sessions = 1), a 40 GiB tenant that no longer fits, and a wrong token are each refused
# with a clear message, and none leaves anything on the GPU (its memory and its process list
# are as before). Usage: tests/gpu/tenant_admission.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l; }
start_tenant_server admission '[tenant big]
token = big
mem_quota = 60GiB
max_sessions = 1
[tenant other]
token = other
mem_quota = 40GiB'
env $(tenant_env big big) "$B/bin/hold_memory" 256 30 >"$LOGS/admission.big.out" 2>&1 &
H=$!
TPIDS+=("$H")
for _ in $(seq 100); do grep -q ready "$LOGS/admission.big.out" && break; sleep 0.2; done
before=$(used_mib); apps0=$(apps)
env $(tenant_env big big) "$B/bin/vadd_static" >"$LOGS/admission.limit.out" 2>&1; r1=$?
env $(tenant_env other other) "$B/bin/vadd_static" >"$LOGS/admission.memory.out" 2>&1; r2=$?
env $(tenant_env big wrong) "$B/bin/vadd_static" >"$LOGS/admission.token.out" 2>&1; r3=$?
sleep 1
after=$(used_mib); apps1=$(apps)
kill "$H" 2>/dev/null
m1=$(grep -o 'refused the session: [^(]*' "$LOGS/admission.limit.out" | head -1)
m2=$(grep -o 'refused the session: [^(]*' "$LOGS/admission.memory.out" | head -1)
m3=$(grep -o 'refused the session: .*' "$LOGS/admission.token.out" | head -1)
echo "session limit (rc=$r1): $m1"
echo "over quota (rc=$r2): $m2"
echo "wrong token (rc=$r3): $m3"
echo "GPU memory used: ${before} MiB before the refusals, ${after} MiB after; compute processes $apps0 then $apps1"
if [ $r1 -ne 0 ] && [ $r2 -ne 0 ] && [ $r3 -ne 0 ] &&
    [[ $m1 == *"session limit reached"* ]] && [[ $m2 == *"insufficient GPU memory"* ]] &&
    [[ $m3 == *"wrong token"* ]] && [ $((after - before)) -le 16 ] && [ "$apps1" = "$apps0" ]; then
    echo "PASS session limit, over-quota admission and wrong token refused with their reasons; nothing left allocated"
else
    echo "FAIL refusals: rc $r1/$r2/$r3, memory $before -> $after MiB, processes $apps0 -> $apps1"
    exit 1
fi
