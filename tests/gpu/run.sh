#!/bin/bash
# The GPU suite, run on a host with an NVIDIA GPU from the bundle made by tests/gpu/bundle.sh:
# every test program natively and through rgpu (gpu-server on 127.0.0.1, the client first in the
# library path), outputs compared; a faulting kernel beside a healthy client; memory freed when
# a client dies; the same programs across two network namespaces ("two hosts" over veth).
# Prints a summary table last. Usage: tests/gpu/run.sh [BUNDLE_DIR]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
LOGS=${OUT:-/tmp}/rgpu-gpu-logs
mkdir -p "$LOGS"
DEPS=$B/deps
PORT=7070
declare -a ROWS
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; LD_LIBRARY_PATH=$DEPS "$B/bin/ip" netns del rgpu-srv 2>/dev/null; }
trap cleanup EXIT

row() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); echo "$2 $1 $3"; }
native() { LD_LIBRARY_PATH=$DEPS "$@"; }
remote() { LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=${RSERVER:-127.0.0.1:$PORT} "$@"; }
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

start_server() { # listen-addr logname [netns]
    local pre=()
    [ -n "${3:-}" ] && pre=(env LD_LIBRARY_PATH=$DEPS "$B/bin/ip" netns exec "$3" env LD_LIBRARY_PATH=$DEPS)
    LD_LIBRARY_PATH=$DEPS "${pre[@]}" "$B/bin/gpu-server" --listen "$1" --port $PORT \
        --log-level info >"$LOGS/$2.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    sleep 2
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
start_server 127.0.0.1 server
head -5 "$LOGS/server.log"

# 1. Programs: native vs rgpu, static and shared cudart.
for prog in vadd matmul streams ptx_driver copies fault graph graph_nodes printf device_assert textures \
            jit_options graph_cond; do
    for kind in static shared; do
        exe=$B/bin/${prog}_$kind
        n=$LOGS/${prog}_$kind
        t0=$(date +%s.%N); native "$exe" >"$n.native" 2>"$n.native.err"; rn=$?
        t1=$(date +%s.%N); remote "$exe" >"$n.rgpu" 2>"$n.rgpu.err"; rr=$?
        t2=$(date +%s.%N)
        times=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN{printf "native %.2fs rgpu %.2fs", b-a, c-b}')
        if [ $rn -eq 0 ] && [ $rr -eq 0 ] && cmp -s "$n.native" "$n.rgpu"; then
            row "${prog}_$kind" PASS "same output ($(wc -l <"$n.rgpu") lines), $times"
        else
            row "${prog}_$kind" FAIL "exit native=$rn rgpu=$rr, $times; diff: $(diff "$n.native" "$n.rgpu" | head -3 | tr '\n' ' ')"
            tail -3 "$n.rgpu.err"
        fi
    done
done
# Libraries: cuBLAS from the toolkit, and PyTorch (cuBLAS, cuDNN) from the host's python3.
compare() { # name cmd...
    local name=$1; shift
    native "$@" >"$LOGS/$name.native" 2>"$LOGS/$name.native.err"; local rn=$?
    remote "$@" >"$LOGS/$name.rgpu" 2>"$LOGS/$name.rgpu.err"; local rr=$?
    if [ $rn -eq 0 ] && [ $rr -eq 0 ] && cmp -s "$LOGS/$name.native" "$LOGS/$name.rgpu"; then
        row "$name" PASS "same output: $(grep -v PASS "$LOGS/$name.rgpu" | tail -1)"
    else
        row "$name" FAIL "exit native=$rn rgpu=$rr: $(tail -2 "$LOGS/$name.rgpu.err" | tr '\n' ' ')"
    fi
}
compare cublas_sgemm "$B/bin/cublas_sgemm"
# Driver-API programs: virtual memory management, memory pools, stream attributes, 2D copies.
compare vmm_pools "$B/bin/vmm_pools"
compare copies_2d "$B/bin/copies_2d"
# Copies of 1 byte to 1 GiB with 4 data lanes (the default) for those of 32 MiB and more.
compare copies_lanes env RGPU_LANES=4 "$B/bin/copies_static"
# Asynchronous lane copies of pinned memory (they return once sent): both runs PASS, and how
# long a 64 MiB one took to return, natively and through rgpu.
native "$B/bin/lanes_async" >"$LOGS/lanes_async.native" 2>&1; rn=$?
remote env RGPU_LANES=4 "$B/bin/lanes_async" >"$LOGS/lanes_async.rgpu" 2>&1; rr=$?
la=$(for m in native rgpu; do echo "$m: $(sed -n 's/^async 64 MiB HtoD: //p' "$LOGS/lanes_async.$m")"; done | tr '\n' ' ')
if [ $rn -eq 0 ] && [ $rr -eq 0 ] && grep -q PASS "$LOGS/lanes_async.rgpu"; then
    row lanes_async PASS "$la"
else
    row lanes_async FAIL "exit native=$rn rgpu=$rr: $(grep FAIL "$LOGS/lanes_async.rgpu" | head -2 | tr '\n' ' ')"
fi
compare arrays "$B/bin/arrays"
compare torch_smoke python3 "$ROOT/tests/gpu/torch_smoke.py"
compare torch_graph python3 "$ROOT/tests/gpu/torch_graph.py"
compare torch_features python3 "$ROOT/tests/gpu/torch_features.py"
compare torch_gpt2 python3 "$ROOT/tests/gpu/torch_gpt2.py"
compare torch_ipc python3 "$ROOT/tests/gpu/torch_ipc.py" # two processes, two sessions
compare torch_compile python3 "$ROOT/tests/gpu/torch_compile.py" # Inductor/Triton kernels
compare cupy_smoke python3 "$ROOT/tests/gpu/cupy_smoke.py"
# NVRTC's compile cache through the driver's export table da9151d3 (cuDNN's runtime-compiled
# engines, CuPy, Triton use NVRTC): a repeated compile within 3x of native's.
N=$ROOT/tests/gpu/nvrtc_cache.py
native python3 "$N" >"$LOGS/nvrtc_cache.native" 2>&1
nm=$(sed -n 's/^repeat compile median \([0-9.]*\) ms/\1/p' "$LOGS/nvrtc_cache.native")
if remote python3 "$N" --max-ms "$(awk -v m="${nm:-10}" 'BEGIN{print 3 * m}')" >"$LOGS/nvrtc_cache.rgpu" 2>&1; then
    row nvrtc_cache PASS "repeat compile: native ${nm:-?} ms, $(tail -1 "$LOGS/nvrtc_cache.rgpu")"
else
    row nvrtc_cache FAIL "repeat compile: native ${nm:-?} ms, rgpu $(tail -1 "$LOGS/nvrtc_cache.rgpu") (export table da9151d3 refused)"
fi
# JAX (jit, grad, a training loop, XLA autotuning): losses within a relative tolerance, since
# the autotuner's choices make the last digits vary natively too.
J=$ROOT/tests/gpu/jax_train.py
native python3 "$J" >"$LOGS/jax_train.native" 2>"$LOGS/jax_train.native.err"; rn=$?
remote python3 "$J" >"$LOGS/jax_train.rgpu" 2>"$LOGS/jax_train.rgpu.err"; rr=$?
if [ $rn -eq 0 ] && [ $rr -eq 0 ] &&
   msg=$(python3 "$J" --compare "$LOGS/jax_train.native" "$LOGS/jax_train.rgpu" --rtol 1e-4 2>&1); then
    row jax_train PASS "$msg"
else
    row jax_train FAIL "exit native=$rn rgpu=$rr: ${msg:-} $(grep -m2 -E 'Error|FAILED|not supported' "$LOGS/jax_train.rgpu.err" | tr '\n' ' ')"
fi
# What gpu-server's GPUDirect RDMA check finds on this host (natively; no NIC needed): a row
# that informs (INFO) rather than passes, since a host without dmabuf export is not a failure.
native "$B/bin/rgpu-dmabuf-probe" 0 >"$LOGS/dmabuf_probe.out" 2>&1
row dmabuf_probe INFO "$(sed -n 's/^verdict: //p' "$LOGS/dmabuf_probe.out" | head -1)"
# The NVML shim: what PyTorch and monitoring read through libnvidia-ml.so.1, from the server.
if remote python3 "$ROOT/tests/gpu/nvml_smoke.py" >"$LOGS/nvml_smoke.out" 2>&1; then
    row nvml_smoke PASS "$(grep -E 'memory total|utilization' "$LOGS/nvml_smoke.out" | head -2 | tr '\n' ' ')"
else
    row nvml_smoke FAIL "$(grep -E 'FAIL|Error' "$LOGS/nvml_smoke.out" | head -3 | tr '\n' ' ')"
fi
# Training losses: native and rgpu within a relative tolerance rather than as text.
# Kernel parameter layouts: the client reads them from the image; the driver's must be the same.
K="mixed none wide _Z4fillIfEvPT_S0_ tensor_map aligned32"
native python3 "$ROOT/tests/gpu/param_layouts.py" "$B/bin/params.cubin" $K >"$LOGS/param_layouts.native" 2>&1
RGPU_LAYOUT_CHECK=1 RGPU_LOG_LEVEL=info remote python3 "$ROOT/tests/gpu/param_layouts.py" \
    "$B/bin/params.cubin" $K >"$LOGS/param_layouts.rgpu" 2>"$LOGS/param_layouts.rgpu.err"
agreed=$(grep -c 'as the driver says' "$LOGS/param_layouts.rgpu.err")
if [ -s "$LOGS/param_layouts.native" ] && cmp -s "$LOGS/param_layouts.native" "$LOGS/param_layouts.rgpu" &&
    [ "$agreed" = 6 ]; then
    row param_layouts PASS "6 kernels: same layouts; read from the image, as the driver gives them"
else
    row param_layouts FAIL "$(diff "$LOGS/param_layouts.native" "$LOGS/param_layouts.rgpu" | head -3 | tr '\n' ' ') $(grep -c 'the image says' "$LOGS/param_layouts.rgpu.err") differ, $agreed agree"
fi

T=$ROOT/tests/gpu/torch_train.py; msg=
native python3 "$T" --json >"$LOGS/torch_train.native" 2>"$LOGS/torch_train.native.err"; rn=$?
remote python3 "$T" --json >"$LOGS/torch_train.rgpu" 2>"$LOGS/torch_train.rgpu.err"; rr=$?
if [ $rn -eq 0 ] && [ $rr -eq 0 ] && msg=$(python3 "$T" --compare "$LOGS/torch_train.native" "$LOGS/torch_train.rgpu" --rtol 1e-3); then
    row torch_train PASS "${msg#PASS }"
else
    row torch_train FAIL "exit native=$rn rgpu=$rr: ${msg:-$(tail -2 "$LOGS/torch_train.rgpu.err" | tr '\n' ' ')}"
fi
# NVIDIA's cuda-samples from the bundle (tests/gpu/samples.sh; its own gpu-server, one row each;
# RGPU_GPU_SAMPLES=0 leaves them out; past SAMPLES_BUDGET_S seconds the rest are SKIP rows).
if [ "${RGPU_GPU_SAMPLES:-1}" != 0 ]; then
    : >"$LOGS/samples.rows"
    SAMPLES_BUDGET_S=${SAMPLES_BUDGET_S:-300} SAMPLES_ROWS=$LOGS/samples.rows \
        "$ROOT/tests/gpu/samples.sh" run "$B" >"$LOGS/samples.out" 2>&1 ||
        row cuda-samples FAIL "samples.sh: $(tail -1 "$LOGS/samples.out")"
    while IFS=$'\t' read -r n s r; do row "sample $n" "$s" "$r"; done <"$LOGS/samples.rows"
fi
native "$B/bin/rgpu-demo-app" >"$LOGS/demo.native"; remote "$B/bin/rgpu-demo-app" >"$LOGS/demo.rgpu"
cmp -s "$LOGS/demo.native" "$LOGS/demo.rgpu" && row demo PASS "$(tail -1 "$LOGS/demo.rgpu")" ||
    row demo FAIL "$(cat "$LOGS/demo.rgpu")"

# 2. A faulting kernel while another client works: the other client is unaffected.
remote "$B/bin/hold_memory" 64 5 >"$LOGS/bystander.out" 2>&1 &
BY=$!
sleep 1
remote "$B/bin/fault_static" >"$LOGS/fault2.out" 2>&1; rf=$?
wait $BY; rb=$?
if [ $rf -eq 0 ] && [ $rb -eq 0 ] && grep -q PASS "$LOGS/bystander.out"; then
    row "fault beside healthy client" PASS "fault: $(grep -o 'cudaError[A-Za-z]*' "$LOGS/fault2.out" | head -1); bystander intact"
else
    row "fault beside healthy client" FAIL "fault rc=$rf bystander rc=$rb $(cat "$LOGS/bystander.out")"
fi

# 3. A client dies holding 4 GiB: its worker exits and the card's memory comes back.
before=$(used_mib)
# Started directly (not through a shell function) so that $! is the client process itself.
LD_LIBRARY_PATH=$B/client:$DEPS RGPU_SERVER=127.0.0.1:$PORT "$B/bin/hold_memory" 4096 60 \
    >"$LOGS/hold.out" 2>&1 &
H=$!
for _ in $(seq 100); do grep -q ready "$LOGS/hold.out" && break; sleep 0.2; done
during=$(used_mib)
kill -9 $H; wait $H 2>/dev/null
sleep 3
after=$(used_mib)
if [ $((during - before)) -ge 4000 ] && [ $((after - before)) -le 64 ]; then
    row "dead client frees memory" PASS "used MiB before $before, holding $during, after kill $after"
else
    row "dead client frees memory" FAIL "used MiB before $before, holding $during, after kill $after"
fi

# 4. Tenants: a 4 GiB quota seen and enforced in PyTorch; a wrong token refused with the reason.
cat >"$LOGS/tenants.conf" <<'CONF'
[tenant quota-test]
token = t0ken
mem_quota = 4GiB
CONF
LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 127.0.0.1 --port 7073 --config "$LOGS/tenants.conf" \
    >"$LOGS/server-tenants.log" 2>&1 &
PIDS+=($!)
sleep 2
RSERVER=127.0.0.1:7073 RGPU_TENANT=quota-test RGPU_TOKEN=t0ken remote python3 "$ROOT/tests/gpu/torch_quota.py" \
    >"$LOGS/quota.out" 2>&1
if grep -q PASS "$LOGS/quota.out"; then
    row "tenant quota 4 GiB (PyTorch)" PASS "$(grep -E 'total|out of memory' "$LOGS/quota.out" | tr '\n' ' ')"
else
    row "tenant quota 4 GiB (PyTorch)" FAIL "$(tail -3 "$LOGS/quota.out" | tr '\n' ' ')"
fi
if RSERVER=127.0.0.1:7073 RGPU_TENANT=quota-test RGPU_TOKEN=bad remote "$B/bin/vadd_static" >"$LOGS/badtoken.out" 2>&1; then
    row "wrong token refused" FAIL "the program ran"
else
    row "wrong token refused" PASS "$(grep -o 'refused the session: [^.]*' "$LOGS/badtoken.out" | head -1)"
fi

# 4b. Tenants on the GPU (tests/gpu/tenant_*.sh, each with its own gpu-server; RGPU_GPU_TENANTS=0
# leaves them out): admission refusals, weights 1:3, four sessions of one tenant, a 20% cap, a
# guaranteed tenant's latency beside best effort, faults beside a long computation, and each
# sharing mode's fault isolation. One row each, from the script's last line.
if [ "${RGPU_GPU_TENANTS:-1}" != 0 ]; then
    for t in admission share sessions cap latency faults isolation; do
        LOGS=$LOGS "$ROOT/tests/gpu/tenant_$t.sh" "$B" >"$LOGS/tenant_$t.out" 2>&1
        last=$(tail -1 "$LOGS/tenant_$t.out")
        case $last in
            PASS*) row "tenant $t" PASS "${last#PASS }" ;;
            *) row "tenant $t" FAIL "${last#FAIL }" ;;
        esac
    done
fi

# 5. No server reachable.
if RSERVER=127.0.0.1:1 remote "$B/bin/vadd_static" >"$LOGS/noserver.out" 2>&1; then
    row "no server" FAIL "succeeded?"
else
    row "no server" PASS "$(grep -o 'cannot reach gpu-server at [^:]*:[0-9]*' "$LOGS/noserver.out" | head -1)"
fi
kill "$SERVER_PID"

# 6. Two hosts: gpu-server in its own network namespace, client across a veth pair.
IP="env LD_LIBRARY_PATH=$DEPS $B/bin/ip"
if $IP netns add rgpu-srv 2>"$LOGS/netns.err" &&
    $IP link add rgpu-c type veth peer name rgpu-s &&
    $IP link set rgpu-s netns rgpu-srv &&
    $IP addr add 10.77.0.1/24 dev rgpu-c && $IP link set rgpu-c up &&
    $IP netns exec rgpu-srv $IP addr add 10.77.0.2/24 dev rgpu-s &&
    $IP netns exec rgpu-srv $IP link set rgpu-s up &&
    $IP netns exec rgpu-srv $IP link set lo up; then
    start_server 10.77.0.2 server-netns rgpu-srv
    for prog in vadd matmul copies; do
        n=$LOGS/${prog}_netns
        if RSERVER=10.77.0.2:$PORT remote "$B/bin/${prog}_static" >"$n.rgpu" 2>"$n.err" &&
            cmp -s "$n.rgpu" "$LOGS/${prog}_static.native"; then
            row "${prog}_static over veth" PASS "same output as native"
        else
            row "${prog}_static over veth" FAIL "$(tail -2 "$n.err")"
        fi
    done
else
    row "two hosts (netns)" SKIP "$(cat "$LOGS/netns.err")"
fi

echo
echo "================ rgpu GPU suite summary ================"
printf '%s\n' "${ROWS[@]}"
printf '%s\n' "${ROWS[@]}" | grep -c ' FAIL ' | sed 's/^/failures: /'
