#!/bin/bash
# The module cache end to end: gpu-server (fake driver) with a private cache directory, and two
# client processes that load the same 200 KiB image twice each (as a module, then a library).
# The first load of the first process sends the bytes once; every other load sends only the
# hash: checked on the client's wire trace (RGPU_TRACE_CALLS) and the server's log lines.
# Usage: module_cache_e2e.sh GPU_SERVER FAKECUDA LIB_DIR LOAD_IMAGE
set -u
SERVER=$1 FAKE=$2 LIBDIR=$3 PROG=$4
WORK=$(mktemp -d)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$WORK/server.log"; exit 1; }

PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
printf '[server]\nmodule_cache = %s/cache\n' "$WORK" >"$WORK/server.conf"
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
    sleep 0.1
done

# Under LeakSanitizer: the client keeps unloaded modules' objects on purpose (functions may
# still point at them), so leak checking is for the server side here.
for run in 1 2; do
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 RGPU_SERVER=127.0.0.1:$PORT RGPU_TRACE_CALLS=1 LD_LIBRARY_PATH=$LIBDIR timeout 60 "$PROG" \
        >"$WORK/run$run.out" 2>"$WORK/run$run.trace" || fail "run $run: $(cat "$WORK/run$run.trace")"
    grep -q PASS "$WORK/run$run.out" || fail "run $run did not pass"
done
sleep 0.5 # the second worker's log lines
# Loads in order: flags 0x1 = by hash (data = 32 bytes), 0x2 = bytes follow (as bulk).
loads() { grep -oE '(MODULE|LIBRARY)_LOAD 0x[0-9a-f]+ 0x[0-9a-f]+' "$1" | awk '{print $1, $3}' | tr '\n' ' '; }
[ "$(loads "$WORK/run1.trace")" = "MODULE_LOAD 0x1 MODULE_LOAD 0x2 LIBRARY_LOAD 0x1 " ] ||
    fail "run 1 loads: $(loads "$WORK/run1.trace")"
[ "$(loads "$WORK/run2.trace")" = "MODULE_LOAD 0x1 LIBRARY_LOAD 0x1 " ] ||
    fail "run 2 loads: $(loads "$WORK/run2.trace")"
[ "$(grep -c 'module cache: stored' "$WORK/server.log")" = 1 ] || fail "expected one image stored"
[ "$(grep -c 'module cache: hit, 204800 image bytes not sent' "$WORK/server.log")" = 3 ] ||
    fail "expected three cache hits"
[ "$(stat -c %a "$WORK/cache")" = 700 ] || fail "cache directory not private"
# Library loads read the image in place from its cache file (CU_LIBRARY_BINARY_IS_PRESERVED):
# the fake driver checks at each unload (which must succeed) that the image is still there.
[ "$(grep -c 'library image of 204800 bytes read in place from its cache file' "$WORK/server.log")" = 2 ] ||
    fail "expected two library loads from the cache file"
grep -q "preserved image of a library changed" "$WORK/server.log" && fail "a preserved image changed"
echo "module cache: 1 image sent, 3 loads by hash: PASS"
