#!/bin/bash
# How a job's start grows with the pool (docs/pool.md, "Pools that scale"), on this machine, no GPU:
#  1. job start (cuInit, and to the end of the first call) against pools of 1, 10 and 100
#     gpu-servers on the fake driver, each on its own loopback address, the pool one DNS name;
#  2. the probe and placement alone against 100, 1,000 and 10,000 members answering probes
#     (rgpu-bench-pool-fake: one process, one loopback address per member), with every member
#     well and with one member that never answers;
# each with the build's client (BUILD_DIR) and, when BASE_DIR is given, with a client built
# before the change (its bin/ and lib/), for the numbers before and after.
# BASE_DIR holds lib/libcuda.so.1, bin/rgpu-bench-pool-start and bin/rgpu-bench-pool-place built
# from the commit before the change (67db830: its client/pool.c and client/config.c, with this
# folder's pool_start.c and pool_place.c, which did not exist then).
# Usage: bench/pool_scale.sh BUILD_DIR [BASE_DIR]     (root: it mounts its own /etc/hosts in a
#        mount namespace of its own, so the pool's names resolve to its members; nothing of the
#        machine's is changed). Env: RUNS (job starts per point, 15), ITER (placements per
#        point, 10), SIZES_REAL ("1 10 100"), SIZES_FAKE ("100 1000 10000").
set -u
BUILD=$(cd "$1" && pwd)
BASE=${2:+$(cd "$2" && pwd)}
if [ -z "${POOL_SCALE_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "pool_scale: needs root (a mount namespace for /etc/hosts)" >&2; exit 1; }
    exec env POOL_SCALE_NS=1 unshare -m "$0" "$@"
fi
RUNS=${RUNS:-15}
ITER=${ITER:-10}
SIZES_REAL=${SIZES_REAL:-1 10 100}
SIZES_FAKE=${SIZES_FAKE:-100 1000 10000}
WORK=$(mktemp -d /tmp/rgpu-pool-scale.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
mount --make-rprivate / 2>/dev/null
touch "$WORK/hosts"
mount --bind "$WORK/hosts" /etc/hosts || { echo "pool_scale: cannot mount over /etc/hosts" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"

export FAKECUDA_MEM_MB=10240 RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret RGPU_TRANSPORT=tcp
export RGPU_NCCL=0 HOME=$WORK
unset RGPU_SERVER RGPU_CONFIG RGPU_POLICY RGPU_MEM_QUOTA RGPU_PROBE_SAMPLE
printf '[tenant alpha]\ntoken = alpha-secret\nmem_quota = 64MiB\n' >"$WORK/server.conf"
PORT=17071

# stats FILE KEY -> "median p90 max" of KEY=value lines
stats() {
    python3 - "$1" "$2" <<'PY'
import re, sys
v = sorted(float(m.group(1)) for m in re.finditer(sys.argv[2] + r"=([0-9.]+)", open(sys.argv[1]).read()))
if not v:
    print("- - -")
else:
    q = lambda p: v[min(len(v) - 1, int(round(p * (len(v) - 1))))]
    print("%.1f %.1f %.1f" % (q(0.5), q(0.9), v[-1]))
PY
}
clients() { # label dir: the client builds measured
    echo "after $BUILD"
    [ -n "$BASE" ] && echo "before $BASE"
}

echo "# Pool scale on $(hostname) ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)), $(date -u +%F)"
echo
echo "## 1. Job start against gpu-servers on the fake driver ($RUNS starts a point)"
echo
echo "| servers | client | cuInit ms (median / p90 / max) | to first call ms (median / p90 / max) |"
echo "|---|---|---|---|"
started=0
for n in $SIZES_REAL; do
    while [ "$started" -lt "$n" ]; do
        i=$started
        ip=127.2.$((i / 250)).$((i % 250 + 1))
        "$BUILD/bin/gpu-server" --config "$WORK/server.conf" --listen "$ip" --port $PORT \
            --driver "$BUILD/tests/fakecuda/libfakecuda.so" >"$WORK/server-$i.log" 2>&1 &
        PIDS+=($!)
        echo "$ip pool-real" >>"$WORK/hosts"
        for _ in $(seq 100); do grep -q "listening on" "$WORK/server-$i.log" && break; sleep 0.05; done
        started=$((started + 1))
    done
    while read -r label dir; do
        : >"$WORK/start.out"
        for _ in $(seq "$RUNS"); do
            LD_LIBRARY_PATH=$dir/lib RGPU_POOL=pool-real:$PORT "$dir/bin/rgpu-bench-pool-start" \
                >>"$WORK/start.out" 2>>"$WORK/start.err"
        done
        read -r c50 c90 cmax <<<"$(stats "$WORK/start.out" cuinit_ms)"
        read -r f50 f90 fmax <<<"$(stats "$WORK/start.out" first_call_ms)"
        echo "| $n | $label | $c50 / $c90 / $cmax | $f50 / $f90 / $fmax |"
    done < <(clients)
done
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
PIDS=()
: >"$WORK/hosts"

echo
echo "## 2. Probe and placement alone against members that answer probes ($ITER placements a point)"
echo
echo "| members | one member silent | client | place ms (median / p90 / max) | of which resolving the name (median) | probes a job | placed |"
echo "|---|---|---|---|---|---|---|"
for n in $SIZES_FAKE; do
    for silent in no yes; do
        args=()
        [ "$silent" = yes ] && args=(--slow $((n / 2)) --slow-ms -1)
        while read -r label dir; do
            "$BUILD/bin/rgpu-bench-pool-fake" --count "$n" --port $PORT --hosts "$WORK/hosts" \
                --name pool-fake "${args[@]}" >"$WORK/fake.out" 2>&1 &
            fake=$!
            for _ in $(seq 600); do grep -q "^listening" "$WORK/fake.out" && break; sleep 0.05; done
            RGPU_POOL=pool-fake:$PORT RGPU_PROBE_TIMEOUT_MS=1000 \
                "$dir/bin/rgpu-bench-pool-place" "$ITER" >"$WORK/place.out" 2>"$WORK/place.err"
            kill -TERM "$fake"
            wait "$fake" 2>/dev/null
            probes=$(sed -n 's/^probes //p' "$WORK/fake.out")
            read -r p50 p90 pmax <<<"$(stats "$WORK/place.out" place_ms)"
            read -r r50 _ _ <<<"$(stats "$WORK/place.out" resolve_ms)"
            echo "| $n | $silent | $label | $p50 / $p90 / $pmax | $r50 | $((${probes:-0} / ITER)) | $(grep -c "placed=1" "$WORK/place.out")/$ITER |"
        done < <(clients)
    done
done
echo
echo "(probe_timeout_ms 1000 in part 2; \"probes a job\": probes the members answered, over the placements)"
