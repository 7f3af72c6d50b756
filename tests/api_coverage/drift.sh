#!/bin/bash
# The coverage check must fail when the table and the code disagree: a copy of the table without
# the cuMemAlloc_v2 row (hand-written) and with a remote row for a generated stub
# (cuMipmappedArrayCreate: mipmapped arrays are not implemented).
# Usage: drift.sh TABLE PYTHON GEN_DRIVER_API_ARGS... (including --coverage-table TABLE)
set -u
TABLE=$1; shift
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
grep -v '^cuMemAlloc_v2 ' "$TABLE" >"$WORK/table.txt"
echo "cuMipmappedArrayCreate remote" >>"$WORK/table.txt"
args=()
for a in "$@"; do [ "$a" = "$TABLE" ] && a=$WORK/table.txt; args+=("$a"); done
if "${args[@]}" 2>"$WORK/err"; then
    echo "FAIL: the check accepted a drifted table"; exit 1
fi
grep -q "cuMemAlloc_v2 is defined in client/ but has no row" "$WORK/err" &&
    grep -q "cuMipmappedArrayCreate is remote but client/ does not define it" "$WORK/err" ||
    { echo "FAIL: unexpected messages:"; cat "$WORK/err"; exit 1; }
echo "drift caught: PASS"
