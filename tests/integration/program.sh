#!/bin/bash
# One nvcc-built program (tests/programs) through the client against the shared gpu-server
# (fixture.sh), so that a failure names its program. It must exit 0 and print PASS; some
# programs' output is checked further below.
# Usage: program.sh STATE_DIR NAME EXE [ARGS...]
set -u
STATE=$1 NAME=$2; shift 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mapfile -t env <"$STATE/env"
lanes=0; [ "$NAME" = copies_static ] && lanes=4 # data lanes: one run with, one without
env "${env[@]}" RGPU_LANES=$lanes RGPU_CLIENT_NAME="$NAME" timeout 300 "$@" \
    >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ $rc -ne 0 ] || ! grep -q PASS "$WORK/out"; then
    echo "FAIL $NAME (exit $rc)"; sed 's/^/    /' "$WORK/out" "$WORK/err" | tail -40; exit 1
fi
case "$NAME" in
printf_*) # device printf reaches the client's stdout, in order with the host's output
    want="host before|device says 1|host after kernel 1|device says 2|host after kernel 2|device says 3|host after kernel 3|PASS|"
    [ "$(tr '\n' '|' <"$WORK/out")" = "$want" ] || { echo "FAIL device printf order:"; cat "$WORK/out"; exit 1; }
    ;;
device_assert_*) # a device assert's message reaches the client's stderr, once per failing thread
    [ "$(grep -c 'Assertion `x > 0` failed' "$WORK/err")" = 2 ] ||
        { echo "FAIL device assert message:"; cat "$WORK/err"; exit 1; }
    ;;
copies_static) # copies of 32 MiB and more went over the 4 data lanes on TCP, never on RDMA
    sid=$(sed -n "s/.*session \([0-9]*\): client $NAME .*/\1/p" "$STATE/server.log" | head -1)
    for _ in $(seq 50); do # the worker logs its lane count at session end
        n=$(sed -n "s/.*session $sid: \([0-9]*\) copies over 4 data lanes.*/\1/p" "$STATE/server.log")
        [ -n "$n" ] && break
        sleep 0.1
    done
    if grep -q '^RGPU_TRANSPORT=rdma$' "$STATE/env"; then
        [ -z "$n" ] || { echo "FAIL rdma session $sid used data lanes"; exit 1; }
    else
        [ "${n:-0}" -ge 6 ] || { echo "FAIL session $sid: '$n' copies over the lanes"; exit 1; }
    fi
    ;;
copies_shared) # no data lanes without RGPU_LANES
    sleep 1 # would the worker log lanes at session end
    sid=$(sed -n "s/.*session \([0-9]*\): client $NAME .*/\1/p" "$STATE/server.log" | head -1)
    ! grep -q "session $sid: .*data lanes" "$STATE/server.log" ||
        { echo "FAIL data lanes used without RGPU_LANES (session $sid)"; exit 1; }
    ;;
esac
echo "ok   $NAME"
