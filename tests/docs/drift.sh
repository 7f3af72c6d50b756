#!/bin/sh
# tools/check_docs.py must fail on a map that names a missing path, a missing identifier and a
# missing file. Usage: drift.sh PYTHON ROOT
set -u
PY=$1 ROOT=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
# (the names are put together here so that this script itself does not contain them)
x=zz$$
for bad in "server/${x}_file.c" "\`srv_${x}_function\`" "\`${x}_file.c\`" "\`cli_session.${x}_member\`"; do
    { cat "$ROOT/docs/ARCHITECTURE.md"; echo "A line naming $bad."; } >"$T/map.md"
    if "$PY" "$ROOT/tools/check_docs.py" "$ROOT" "$T/map.md" >"$T/out" 2>&1; then
        echo "FAIL: check_docs.py accepted $bad"
        fail=1
    elif ! grep -q "map.md:" "$T/out"; then
        echo "FAIL: no file:line for $bad"; cat "$T/out"; fail=1
    fi
done
[ $fail -eq 0 ] && echo "PASS: every kind of missing name is caught"
exit $fail
