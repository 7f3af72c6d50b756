#!/bin/bash
# Fault isolation between tenants: one tenant runs a long computation while another runs an
# out-of-bounds kernel and a third hits a device assert, each repeatedly; the computation's
# result must equal its native result, and the faulting tenants must see their errors.
# Usage: tests/gpu/tenant_faults.sh [BUNDLE_DIR]
source "$(dirname "$0")/tenant_lib.sh"
LAUNCHES=${TENANT_FAULTS_LAUNCHES:-6000}
native "$LOAD" compute "$LAUNCHES" >"$LOGS/faults.native" 2>"$LOGS/faults.native.err" || {
    echo "FAIL native computation: $(tail -2 "$LOGS/faults.native.err")"; exit 1; }
start_tenant_server faults '[tenant long]
token = long
[tenant oob]
token = oob
[tenant assert]
token = assert'
env $(tenant_env long long) "$LOAD" compute "$LAUNCHES" >"$LOGS/faults.rgpu" 2>"$LOGS/faults.rgpu.err" &
C=$!
TPIDS+=("$C")
n=0; oob_ok=0; assert_ok=0
sleep 1
while kill -0 "$C" 2>/dev/null; do
    # each prints PASS when it saw the error a local GPU reports (cudaErrorIllegalAddress,
    # cudaErrorAssert)
    env $(tenant_env oob oob) "$B/bin/fault_static" >"$LOGS/faults.oob.$n" 2>&1 &&
        grep -q PASS "$LOGS/faults.oob.$n" && oob_ok=$((oob_ok + 1))
    env $(tenant_env assert assert) "$B/bin/device_assert_static" >"$LOGS/faults.assert.$n" 2>&1 &&
        grep -q PASS "$LOGS/faults.assert.$n" && assert_ok=$((assert_ok + 1))
    n=$((n + 1))
done
wait "$C"; rc=$?
echo "native:  $(cat "$LOGS/faults.native")"
echo "beside $n out-of-bounds and $n device-assert sessions ($oob_ok and $assert_ok saw their error): $(cat "$LOGS/faults.rgpu")"
if [ $rc -eq 0 ] && [ $n -gt 0 ] && [ $oob_ok -eq $n ] && [ $assert_ok -eq $n ] &&
    cmp -s "$LOGS/faults.native" "$LOGS/faults.rgpu"; then
    echo "PASS long computation equals native beside $n faulting sessions of each kind"
else
    echo "FAIL rc=$rc runs=$n oob_ok=$oob_ok assert_ok=$assert_ok; $(tail -2 "$LOGS/faults.rgpu.err" | tr '\n' ' ')"
    exit 1
fi
