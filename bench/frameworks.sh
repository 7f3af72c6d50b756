#!/bin/bash
# Framework rows (issue 17), on a GPU host from the bundle (tests/gpu/bundle.sh): HF generate()
# decode of a GPT-2 shaped model (b1, fp16, default attention; cold = new key lengths, warm =
# lengths seen), a JAX training step and ResNet-50 (fp16 inference, AMP training), natively and through rgpu over loopback, interleaved
# (native, rgpu, native, rgpu...) RUNS times, since the host is noisy; then each rgpu workload
# once more with RGPU_STATS=1 for its synchronous round trips (over the whole process, and per
# token / step from two lengths' difference). Writes frameworks.md and frameworks.jsonl (into
# $OUT when set) and prints the table.
# Usage: bench/frameworks.sh [BUNDLE_DIR] [RUNS]   (defaults: <repo>/.bundle, 3)
#        FW_WORKLOADS="hf:64 resnet:50" picks workloads (default hf:64 jax:50 resnet:50)
#        FW_SAMPLE=1 preloads the stack sampler (bench/stack_sampler.c) into every run: where
#        each process spent its CPU, in fw-sample-MODE-RUN-WORKLOAD.PID
#        FW_STATS=0 skips the RGPU_STATS runs
#        FW_CONCURRENT=1 runs each native and rgpu pair at the same time, pinned to CPUs 0-4
#        and 5-9 (swapped every run; FW_SERVER_CPUS=10-15 then keeps the server apart)
#        FW_CLIENT_CPUS=2-7 FW_SERVER_CPUS=10-15 pin the programs (both modes) and gpu-server
#        to those CPUs (taskset), as two hosts would keep them apart
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
RUNS=${2:-3}
DEPS=$B/deps
RES=${OUT:-/tmp}
PY="$ROOT/bench/frameworks.py"
J=$RES/frameworks.jsonl
: >"$J"
SRV_PIN=${FW_SERVER_CPUS:+taskset -c $FW_SERVER_CPUS}
APP_PIN=${FW_CLIENT_CPUS:+taskset -c $FW_CLIENT_CPUS}
LD_LIBRARY_PATH=$DEPS $SRV_PIN "$B/bin/gpu-server" --listen 127.0.0.1 --port 7070 >"$RES/fw-server.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null' EXIT
sleep 2
mode() { # native|rgpu cmd...
    local m=$1; shift
    if [ "$m" = native ]; then LD_LIBRARY_PATH=$DEPS $APP_PIN "$@"
    else LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:7070 $APP_PIN "$@"; fi
}
sampler() { # mode run workload: the prefix that preloads the stack sampler when FW_SAMPLE=1
    [ "${FW_SAMPLE:-0}" = 1 ] &&
        echo "env LD_PRELOAD=$B/tools/librgpu-stack-sampler.so RGPU_SAMPLE_OUT=$RES/fw-sample-$1-$2-$3"
}
one() { # mode run workload n [cpus]: one process; its JSON row appended to $J
    local m=$1 r=$2 w=$3 n=$4 pin=${5:+taskset -c $5} line
    line=$(mode $m $pin timeout 300 $(sampler $m $r $w) python3 "$PY" $w $n 2>>"$RES/fw-$m.err" | tail -1)
    echo "{\"mode\": \"$m\", \"run\": $r, \"workload\": \"$w\", \"result\": ${line:-null}}" | tee -a "$J"
}
for r in $(seq "$RUNS"); do
    for w in ${FW_WORKLOADS:-hf:64 jax:50 resnet:50}; do
        if [ "${FW_CONCURRENT:-0}" = 1 ]; then
            # The pair at the same time, on CPU sets swapped from run to run: both see the same
            # host (its speed changes from minute to minute), at the price of sharing the GPU.
            a=0-4 b=5-9
            [ $((r % 2)) = 0 ] && a=5-9 b=0-4
            one native "$r" "${w%:*}" "${w#*:}" $a &
            p1=$!
            one rgpu "$r" "${w%:*}" "${w#*:}" $b &
            wait $p1 $!
        else
            for m in native rgpu; do one $m "$r" "${w%:*}" "${w#*:}"; done
        fi
    done
done
# Synchronous round trips: RGPU_STATS at exit, for two sizes; the difference per token / step.
sync_total() { awk '/^rgpu stats: [A-Z]/ && $4 ~ /^[0-9]+$/ {s += $4} END {print s + 0}' "$1"; }
for w in "hf 16 48 2" "jax 20 60 1"; do # hf: two generate() calls of n tokens per process
    set -- $w
    case " ${FW_WORKLOADS:-hf: jax:} " in *" $1:"*) ;; *) continue ;; esac
    [ "${FW_STATS:-1}" = 0 ] && continue
    for n in $2 $3; do
        mode rgpu env RGPU_STATS=1 timeout 300 python3 "$PY" "$1" "$n" >/dev/null 2>"$RES/fw-stats-$1-$n.txt"
    done
    a=$(sync_total "$RES/fw-stats-$1-$2.txt"); b=$(sync_total "$RES/fw-stats-$1-$3.txt")
    echo "{\"mode\": \"rgpu\", \"workload\": \"$1\", \"sync_round_trips\": {\"$2\": $a, \"$3\": $b, \"per_unit\": $(awk -v a="$a" -v b="$b" -v x="$2" -v y="$3" -v k="$4" 'BEGIN{printf "%.2f", (b - a) / (y - x) / k}')}}" | tee -a "$J"
done
python3 - "$J" "$RES/frameworks.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def vals(m, w, k):
    return [r["result"][k] for r in rows if r.get("mode") == m and r.get("workload") == w and r.get("result")]
out = ["| workload | native (median, min-max) | rgpu (median, min-max) | rgpu/native |", "| --- | --- | --- | --- |"]
for w, k, unit, higher in (("hf", "cold_tok_s", "tok/s cold", True), ("hf", "warm_tok_s", "tok/s warm", True),
                           ("jax", "step_ms", "ms/step", False),
                           ("resnet", "infer_img_s", "fp16 inference images/s", True),
                           ("resnet", "train_img_s", "AMP training images/s", True)):
    n, r = vals("native", w, k), vals("rgpu", w, k)
    if not any(x.get("workload") == w for x in rows):
        continue  # not picked in FW_WORKLOADS
    if not n or not r:
        out.append("| %s %s | %s | %s | - |" % (w, unit, n or "failed", r or "failed")); continue
    mn, mr = statistics.median(n), statistics.median(r)
    ratio = mr / mn if higher else mn / mr
    out.append("| %s %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2fx |" % (w, unit, mn, min(n), max(n), mr, min(r), max(r), ratio))
for w, k, unit, higher in (("hf", "cold_tok_s", "tok/s cold", True), ("hf", "warm_tok_s", "tok/s warm", True),
                           ("jax", "step_ms", "ms/step", False)):
    pairs = []  # run by run: each native process and the rgpu one after it
    for run in sorted({x["run"] for x in rows if "run" in x}):
        n = [x["result"][k] for x in rows if x.get("run") == run and x.get("workload") == w and x.get("mode") == "native" and x.get("result")]
        r = [x["result"][k] for x in rows if x.get("run") == run and x.get("workload") == w and x.get("mode") == "rgpu" and x.get("result")]
        if n and r:
            pairs.append(r[0] / n[0] if higher else n[0] / r[0])
    if len(pairs) > 1:
        geo = statistics.geometric_mean(pairs)
        out.append("| %s %s, pair by pair | | | median %.2fx (%.2f-%.2f), geometric mean %.2fx, %d pairs |" % (w, unit, statistics.median(pairs), min(pairs), max(pairs), geo, len(pairs)))
for r in rows:
    if "sync_round_trips" in r:
        s = r["sync_round_trips"]
        out.append("| %s synchronous round trips (rgpu) | | %s | per %s: %s |" % (r["workload"], {k: v for k, v in s.items() if k != "per_unit"}, "token" if r["workload"] == "hf" else "step", s["per_unit"]))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
