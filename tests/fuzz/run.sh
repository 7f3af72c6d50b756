#!/bin/sh
# Run the libFuzzer targets of tests/fuzz for SECONDS each (default 20), from the seed corpus and
# the kept regressions; new inputs go to a scratch directory, never into the repository. A crash,
# leak or timeout fails the run and leaves its input in OUT (default: a fresh temporary
# directory, printed), to be kept under tests/fuzz/regressions/TARGET/ once fixed.
# Usage: tests/fuzz/run.sh BUILD_FUZZ_DIR [SECONDS] [TARGET...]
set -u
BUILD=$1
SECONDS_EACH=${2:-20}
shift
[ $# -gt 0 ] && shift
TARGETS=${*:-frame call worker}
SRC=$(cd "$(dirname "$0")" && pwd)
OUT=${FUZZ_OUT:-$(mktemp -d /tmp/rgpu-fuzz.XXXXXX)}
status=0
for t in $TARGETS; do
    mkdir -p "$OUT/$t/new" "$OUT/$t/crashes"
    kept=$SRC/regressions/$t # absent while a target has no kept input: libFuzzer exits on it
    [ -d "$kept" ] || kept=
    echo "== fuzz_$t for ${SECONDS_EACH}s"
    if ! "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 \
            -rss_limit_mb=3072 -max_len=65536 -print_final_stats=1 \
            -artifact_prefix="$OUT/$t/crashes/" "$OUT/$t/new" "$SRC/corpus/$t" \
            ${kept:+"$kept"} >"$OUT/$t/log" 2>&1; then
        echo "fuzz_$t FAILED: input(s) in $OUT/$t/crashes, log $OUT/$t/log"
        grep -E "ERROR|SUMMARY" "$OUT/$t/log" | head -5
        status=1
    else
        grep -E "stat::number_of_executed_units|stat::new_units_added" "$OUT/$t/log"
    fi
done
[ $status -eq 0 ] && [ -z "${FUZZ_OUT:-}" ] && rm -rf "$OUT"
exit $status
