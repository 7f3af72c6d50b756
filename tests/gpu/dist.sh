#!/bin/bash
# Distributed and multi-GPU programs natively and through rgpu on one GPU host with 2 or 4 GPUs
# (issue 29), in one call of at most ~9 minutes, every step under `timeout`; prints one table.
# Placements:
#   native  the programs alone
#   one     one gpu-server serving every GPU (one GPU host): RGPU_SERVER=127.0.0.1:P1
#   two     two gpu-servers in network namespaces rgpu-h0 / rgpu-h1 joined by a bridge (two
#           "GPU hosts": each its own NCCL_HOSTID, so NCCL between their workers takes the
#           network, sockets over the veth pairs, as across hosts); with 2 GPUs one each, with
#           4 GPUs two each (ranks 2+2: NVLink inside a "host", the network between them)
# Steps, most important first (a step that would not fit the time left is a SKIP row):
#   torch    tests/gpu/dist_torch.py, a process per GPU (as torchrun starts them): collectives with
#            all_to_all_single, gather, scatter; ungrouped isend/irecv, a pipeline,
#            batch_isend_irecv; all_reduce captured in a CUDA graph and replayed; a custom
#            all-reduce over CUDA IPC buffers; DDP and FSDP2 training (losses against native,
#            step times)
#   busbw    all-reduce bus bandwidth 4 B .. 1 GiB (tests/nccl/nccl_busbw, a process per GPU,
#            5 timed repetitions per size), native and one server interleaved twice, two
#            servers once; the 8-byte latency (an all-reduce waited for, median of 300)
#   jax      tests/gpu/dist_jax.py local: pmap psum, a sharded jit, a data-parallel step,
#            ppermute, every GPU in one process
#   single   tests/gpu/dist_single.py: nn.DataParallel, torch.cuda.nccl over the devices of one
#            process, peer copy bandwidth cuda:0 <-> cuda:1
#   cupy     tests/gpu/dist_cupy.py: cupy.cuda.nccl (initAll; a thread per device)
#   faults   a rank killed inside the all-reduces (tests/gpu/dist_fault.py): how long until the
#            survivor has the error (bound 20 s) and until its framework ends it (PyTorch's
#            watchdog dumps its debug information first; reported up to DIST_FAULT_EXIT_S, 45 s),
#            natively and through rgpu (one server); one of the two servers killed; the GPUs'
#            memory back afterwards, and both placements serving the next job
#   vmm      the collectives and DDP again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#   jaxdist  jax.distributed across 2 processes (with 4 GPUs, 2 each)
#   two      with two servers: the veth's raw TCP ceiling between the "hosts" (rgpu-bench-tcp,
#            printed beside the two-server bus bandwidth), torch, busbw (to 64 MiB), jax, single,
#            one of the two servers killed
#   twojax   the jax step of `two` alone
# Steps run in the order of DIST_STEPS (default "torch busbw local faults two vmm jaxdist";
# local = jax, single, cupy); DIST_BUDGET_S (default 480) bounds the run, DIST_SLACK_S (30) how
# far past it a step's timeout may reach; DIST_PORT / DIST_MPORT the servers' and torch's ports.
# tests/gpu/dist_all.sh runs 2 and then 4 GPUs in one call. DIST_TRACE="jax single" runs those
# one-process steps with every rgpu call traced (RGPU_TRACE_CALLS: thread, server, op), NCCL_DEBUG
# and XLA's collective logging, for a hang's diagnosis (in the logs); DIST_NCCL_DEBUG the two
# servers' NCCL_DEBUG (WARN).
# Every process started here has NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NVSHMEM_DISABLE_NVLS=1 (gpu-server too). Processes are ended by pid only. Native and the one
# server see GPUs 0..N-1 only (CUDA_VISIBLE_DEVICES, --devices).
# Output: the table on stdout and in $OUT/dist-table.md; every log in $OUT/dist-logs.tar.gz.
# Usage (root, on the GPU host, from the bundle of tests/gpu/bundle.sh):
#   tests/gpu/dist.sh .bundle 2      (nvidia-h100-x2)
#   tests/gpu/dist.sh .bundle 4      (nvidia-h100-x4)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
# A step past its timeout gets SIGABRT: Python then prints every thread's stack (where it hung).
export PYTHONFAULTHANDLER=${PYTHONFAULTHANDLER-1} # empty: off (RGPU_BACKTRACE then keeps its handler)
ulimit -c 0
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
NGPU=${2:-2}
DEPS=$B/deps
OUTD=${OUT:-/tmp/rgpu-dist-out}
LOGS=/tmp/rgpu-dist-logs
WORK=/tmp/rgpu-dist-work
BUDGET=${DIST_BUDGET_S:-480}
SLACK=${DIST_SLACK_S:-30}
STEPS=${DIST_STEPS:-torch busbw local faults two vmm jaxdist}
T0=$(date +%s)
P1=${DIST_PORT:-7201}
P2=$((P1 + 1))
MPORT=${DIST_MPORT:-29600}
rm -rf "$LOGS" "$WORK"
mkdir -p "$OUTD" "$LOGS" "$WORK"
IP=$(command -v ip || echo "$B/bin/ip")
IPX() { LD_LIBRARY_PATH=$DEPS "$IP" "$@"; }
PIDS=()
netns_clean() {
    IPX netns del rgpu-h0 2>/dev/null
    IPX netns del rgpu-h1 2>/dev/null
    IPX link del rgpu-br 2>/dev/null
}
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    netns_clean
}
netns_clean # a run before this one that did not get to its end
trap cleanup EXIT
trap 'exit 143' TERM INT
elapsed() { echo $(($(date +%s) - T0)); }
fits() { [ $(($(elapsed) + $1)) -le "$BUDGET" ]; } # expected seconds of a step
cap() { # a step's timeout, cut so that no step ends later than SLACK s after the budget
    local left=$((BUDGET + SLACK - $(elapsed)))
    [ "$left" -lt 10 ] && left=10
    echo $(($1 < left ? $1 : left))
}
shell_row() { # placement name status detail
    echo "ROW $2 $3 $4" >>"$LOGS/shell.$1.out"
    echo "$3 [$1] $2 $4"
}
skip() { shell_row "$1" "$2" SKIP "not run: $(elapsed) s of the ${BUDGET} s budget used"; }

NCCL_DIR=${NCCL_DIR:-$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")' 2>/dev/null)}
[ -f "$NCCL_DIR/libnccl.so.2" ] || { echo "no libnccl.so.2 in '$NCCL_DIR' (set NCCL_DIR)"; exit 1; }
HAVE=$(nvidia-smi -L | wc -l)
[ "$HAVE" -ge "$NGPU" ] || { echo "$NGPU GPUs wanted, $HAVE here"; exit 1; }
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -$((NGPU + 1))
echo "NCCL $NCCL_DIR; $NGPU GPUs; budget ${BUDGET} s"

# ---- servers ----------------------------------------------------------------------------------
# busy_poll_us: the workers spin 50 us before blocking on a receive (and the clients,
# RGPU_BUSY_POLL_US): the 8-byte latency row is mostly two wake-ups of a round trip.
BUSY=${DIST_BUSY_POLL_US:-50}
conf() { printf '[server]\nnccl_library = %s/libnccl.so.2\nbusy_poll_us = %s\n' "$NCCL_DIR" "$BUSY" >"$WORK/$1.conf"; }
conf one
ALL=$(seq -s, 0 $((NGPU - 1)))
LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --config "$WORK/one.conf" --listen 127.0.0.1 \
    --port "$P1" --devices "$ALL" --log-level info >"$LOGS/server-one.log" 2>&1 &
PIDS+=($!)
ONE=127.0.0.1:$P1
# Two "hosts": namespaces rgpu-h0 (10.88.0.1) and rgpu-h1 (10.88.0.2) on a bridge with this
# namespace (10.88.0.254), each server its half of the GPUs and its own NCCL host id.
half=$((NGPU / 2))
devs0=$(seq -s, 0 $((half - 1)))
devs1=$(seq -s, "$half" $((NGPU - 1)))
TWO=
start_h() { # h: the gpu-server of "host" h, in its namespace (its pid in SERVER_H<h>)
    local h=$1 d=$devs0
    [ "$h" = 1 ] && d=$devs1
    LD_LIBRARY_PATH=$DEPS "$IP" netns exec rgpu-h$h env LD_LIBRARY_PATH="$DEPS" \
        NCCL_HOSTID=rgpu-host-$h NCCL_SOCKET_IFNAME=rgpu-h$h-i NCCL_NVLS_ENABLE=0 \
        NCCL_IB_DISABLE=1 NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 NCCL_DEBUG=${DIST_NCCL_DEBUG:-WARN} \
        TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        "$B/bin/gpu-server" --config "$WORK/two.conf" --listen 10.88.0.$((h + 1)) \
        --port "$P2" --devices "$d" --log-level info >>"$LOGS/server-h$h.log" 2>&1 &
    PIDS+=($!)
    eval "SERVER_H$h=$!"
}
if IPX link add rgpu-br type bridge 2>"$LOGS/netns.err" && IPX addr add 10.88.0.254/24 dev rgpu-br &&
    IPX link set rgpu-br up; then
    ok=1
    for h in 0 1; do
        ns=rgpu-h$h
        IPX netns add $ns && IPX link add rgpu-h$h-o type veth peer name rgpu-h$h-i &&
            IPX link set rgpu-h$h-i netns $ns && IPX link set rgpu-h$h-o master rgpu-br &&
            IPX link set rgpu-h$h-o up && IPX netns exec $ns "$IP" addr add 10.88.0.$((h + 1))/24 dev rgpu-h$h-i &&
            IPX netns exec $ns "$IP" link set rgpu-h$h-i up && IPX netns exec $ns "$IP" link set lo up ||
            ok=0
    done 2>>"$LOGS/netns.err"
    if [ $ok = 1 ]; then
        conf two
        start_h 0
        start_h 1
        TWO=10.88.0.1:$P2,10.88.0.2:$P2
    fi
fi
[ -n "$TWO" ] || echo "no two-host placement: $(tail -3 "$LOGS/netns.err" | tr '\n' ' ')"
sleep 2
if [ "$NGPU" = 2 ]; then HOSTS_TWO=0,1; else HOSTS_TWO=0,0,1,1; fi
HOSTS_ONE=$(seq -s, 0 $((NGPU - 1)) | sed 's/[0-9]\+/0/g')

# ---- runners ------------------------------------------------------------------------------------
pre() { # placement: PRE=(its environment, for env; a process started `env "${PRE[@]}" cmd &`
    # has $! = the command's own pid, so that it can be ended by pid)
    case $1 in
        native) PRE=(LD_LIBRARY_PATH="$NCCL_DIR:$DEPS" DIST_HOSTS="$HOSTS_ONE"
                     CUDA_VISIBLE_DEVICES="$ALL") ;;
        one) PRE=(LD_LIBRARY_PATH="$B/client:$DEPS" LD_PRELOAD="$B/nccl/libnccl.so.2"
                  RGPU_SERVER="$ONE" DIST_HOSTS="$HOSTS_ONE" RGPU_BUSY_POLL_US="$BUSY") ;;
        two) PRE=(LD_LIBRARY_PATH="$B/client:$DEPS" LD_PRELOAD="$B/nccl/libnccl.so.2"
                  RGPU_SERVER="$TWO" DIST_HOSTS="$HOSTS_TWO" RGPU_BUSY_POLL_US="$BUSY") ;;
    esac
}
on() { # placement cmd...
    pre "$1"
    shift
    env "${PRE[@]}" "$@"
}
have() { [ "$1" != two ] || [ -n "$TWO" ]; }
ranks() { # placement tag timeout nproc script args...: one process per GPU, as torchrun starts them
    local pl=$1 tag=$2 to np=$4 pids=() rc=0
    to=$(cap "$3")
    shift 4
    MPORT=$((MPORT + 1))
    pre "$pl"
    for k in $(seq $((np - 1)) -1 0); do
        env "${PRE[@]}" RANK=$k LOCAL_RANK=$k WORLD_SIZE="$np" LOCAL_WORLD_SIZE="$np" \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$MPORT timeout -s ABRT -k 5 "$to" python3 "$@" \
            >"$LOGS/$tag.$pl.r$k.out" 2>"$LOGS/$tag.$pl.r$k.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cp "$LOGS/$tag.$pl.r0.out" "$LOGS/$tag.$pl.out"
    [ $rc = 0 ] || shell_row "$pl" "$tag" FAIL "a rank ended with $rc (timeout $to s): $(cat "$LOGS/$tag.$pl".r*.err | grep -v '^\s*$' | grep -iv warn | tail -1 | cut -c1-200)"
    grep '^ROW' "$LOGS/$tag.$pl.out" | sed "s/^/[$pl] /"
}
traced() { # tag: TRACE=(the debugging environment when DIST_TRACE names the tag, else none)
    TRACE=(RGPU_TRACE_NONE=1)
    case " ${DIST_TRACE:-} " in
        *" $1 "*) TRACE=(RGPU_TRACE_CALLS=1 NCCL_DEBUG=INFO TF_CPP_MIN_LOG_LEVEL=0
                        TF_CPP_VMODULE=collective_thunk=3,nccl_communicator=3,gpu_clique=3,nccl_collectives=3) ;;
    esac
}
single() { # placement tag timeout cmd...
    local pl=$1 tag=$2 to
    to=$(cap "$3")
    shift 3
    traced "$tag"
    on "$pl" env "${TRACE[@]}" timeout -s ABRT -k 5 "$to" "$@" >"$LOGS/$tag.$pl.out" 2>"$LOGS/$tag.$pl.err"
    local rc=$?
    [ $rc = 0 ] || shell_row "$pl" "$tag" FAIL "exit $rc after at most $to s: $(grep -v '^\s*$' "$LOGS/$tag.$pl.err" | tail -1 | cut -c1-200)"
    grep '^ROW' "$LOGS/$tag.$pl.out" | sed "s/^/[$pl] /"
}
busbw() { # placement round [max MiB (1024)] [timed repetitions (5)]
    local pl=$1 r=$2 max=${3:-1024} reps=${4:-5} pids=() rc=0 to
    to=$(cap 60)
    rm -f "$WORK/busbw.id"
    pre "$pl"
    for k in $(seq $((NGPU - 1)) -1 0); do
        if [ "$k" = 0 ]; then
            env "${PRE[@]}" NCCL_BUSBW_MIN=4 NCCL_BUSBW_STEP=4 NCCL_BUSBW_REPS=$reps NCCL_BUSBW_LAT=1 \
                timeout -k 5 "$to" "$B/bin/nccl_busbw" 0 "$NGPU" "$WORK/busbw.id" "$max" 20 \
                >"$LOGS/busbw.$pl.$r.out" 2>"$LOGS/busbw.$pl.$r.err" || rc=$?
        else
            env "${PRE[@]}" NCCL_BUSBW_MIN=4 NCCL_BUSBW_STEP=4 NCCL_BUSBW_REPS=$reps NCCL_BUSBW_LAT=1 \
                timeout -k 5 "$to" "$B/bin/nccl_busbw" "$k" "$NGPU" "$WORK/busbw.id" "$max" 20 \
                >/dev/null 2>"$LOGS/busbw.$pl.$r.r$k.err" &
            pids+=($!)
        fi
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    [ $rc = 0 ] && echo "busbw [$pl] round $r: $(grep -c bytes "$LOGS/busbw.$pl.$r.out") sizes" ||
        shell_row "$pl" "busbw_round$r" FAIL "exit $rc: $(tail -1 "$LOGS/busbw.$pl.$r.err")"
}
mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -"$NGPU" | awk '{s += $1} END {print s + 0}'; }

# ---- the steps (DIST_STEPS picks them and their order) -----------------------------------------
step_torch() { # PyTorch patterns, native and one server
    for pl in native one; do
        if fits 40; then ranks $pl torch 120 "$NGPU" "$ROOT/tests/gpu/dist_torch.py"; else skip $pl torch; fi
    done
}
step_busbw() { # bus bandwidth, native and one server interleaved
    for r in 1 2; do
        for pl in native one; do
            if fits 15; then busbw $pl $r; else skip $pl "busbw_round$r"; fi
        done
    done
}
step_local() { # every GPU in one process: JAX, PyTorch, CuPy (hang-prone: short timeouts)
    for pl in native one; do
        if fits 40; then DIST_JAX_PPERMUTE=0 single $pl jax 90 python3 "$ROOT/tests/gpu/dist_jax.py" local; else skip $pl jax; fi
        if fits 20; then single $pl single 60 python3 "$ROOT/tests/gpu/dist_single.py"; else skip $pl single; fi
        if fits 15; then single $pl cupy 45 python3 "$ROOT/tests/gpu/dist_cupy.py"; else skip $pl cupy; fi
    done
    for pl in native one; do # apart: a first send/recv between a session's devices may hang
        if fits 20; then DIST_JAX_PPERMUTE=only single $pl jaxpp 35 python3 "$ROOT/tests/gpu/dist_jax.py" local; else skip $pl jaxpp; fi
    done
}
# What a survivor's log says once its collective failed (PyTorch's watchdog, dist_fault.py, or
# a CUDA call on a lost server).
FAULT_SEEN='ncclRemoteError|ncclSystemError|NCCL error|^ERROR [0-9]|DEVICE_UNAVAILABLE|busy or unavailable'
fault() { # placement label limit-seconds how (rank|server): the error must reach the survivor
    # within the limit; how long the framework then takes to end it is reported (its own
    # teardown: PyTorch's watchdog first dumps its debug information), up to DIST_FAULT_EXIT_S
    local pl=$1 tag=$2 lim=$3 how=$4 start rc p0 p1 args=() dev seen= ended= t exit_lim
    exit_lim=${DIST_FAULT_EXIT_S:-45}
    rm -f "$WORK/progress"
    [ "$how" = rank ] && args=(--kill-rank 1 --kill-step 40)
    MPORT=$((MPORT + 1))
    pre "$pl"
    for k in 1 0; do
        dev=$k
        [ "$pl" = two ] && dev=$((k * half)) # rank 1 on the second "host"
        env "${PRE[@]}" RANK=$k LOCAL_RANK=$dev WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$MPORT \
            timeout -k 2 $((exit_lim + 60)) python3 "$ROOT/tests/gpu/dist_fault.py" "${args[@]}" \
            --steps 5000 --progress "$WORK/progress" >"$LOGS/$tag.$pl.r$k.out" 2>&1 &
        eval "p$k=$!"
    done
    for _ in $(seq 400); do [ -s "$WORK/progress" ] && break; sleep 0.1; done
    if [ "$how" = server ]; then # the second host's gpu-server (and, with it, its workers)
        sleep 1
        kill -9 "$SERVER_H1"
    else
        for _ in $(seq 600); do
            [ "$(cut -d' ' -f1 "$WORK/progress" 2>/dev/null || echo 0)" -lt 30 ] && kill -0 "$p0" 2>/dev/null || break
            sleep 0.05
        done
    fi
    start=$(date +%s.%N)
    while :; do # until the survivor has ended, or exit_lim
        t=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
        [ -z "$seen" ] && grep -Eq "$FAULT_SEEN" "$LOGS/$tag.$pl.r0.out" && seen=$t
        kill -0 "$p0" 2>/dev/null || { ended=$t; break; }
        awk -v t="$t" -v l="$exit_lim" 'BEGIN{exit !(t >= l)}' && break
        sleep 0.1
    done
    kill -TERM "$p0" "$p1" 2>/dev/null
    rc=0
    wait "$p0" || rc=$?
    wait "$p1" 2>/dev/null
    local what end_txt
    what=$(grep -Eo -m1 "$FAULT_SEEN" "$LOGS/$tag.$pl.r0.out")
    if [ -n "$ended" ]; then end_txt="the process ended ${ended} s after (exit $rc)"
    else end_txt="the framework had not ended the process ${exit_lim} s after (ended by TERM)"; fi
    if [ ! -s "$WORK/progress" ]; then
        shell_row "$pl" "$tag" FAIL "the ranks never reached their loop (exit $rc): $(grep -v '^\s*$' "$LOGS/$tag.$pl.r0.out" | tail -1 | cut -c1-160)"
    elif [ -n "$seen" ] && awk -v t="$seen" -v l="$lim" 'BEGIN{exit !(t <= l)}'; then
        shell_row "$pl" "$tag" PASS "the survivor had the error ${seen} s after the $how was killed ($what); $end_txt"
    elif [ "$pl" = native ]; then # NCCL over NVLink does not see a dead peer: PyTorch's 600 s
        shell_row "$pl" "$tag" INFO "no error ${exit_lim} s after the $how was killed (natively the bound is PyTorch's timeout, 600 s here)"
    else
        shell_row "$pl" "$tag" FAIL "no error within $lim s of the $how's kill (${seen:+seen after $seen s; }$end_txt)"
    fi
}
step_faults() { # a rank killed inside the all-reduces; the GPUs' memory back; serving after
    local mem0 mem1
    mem0=$(mem_used)
    if fits 50; then fault one fault_kill_rank 20 rank; else skip one fault_kill_rank; fi
    if fits 50; then DIST_FAULT_EXIT_S=10 fault native fault_kill_rank 10 rank; else skip native fault_kill_rank; fi
    sleep 3
    mem1=$(mem_used)
    if [ $((mem1 - mem0)) -le $((200 * NGPU)) ]; then
        shell_row one fault_memory_back PASS "GPU memory used ${mem0} MiB before the faults, ${mem1} MiB after"
    else
        shell_row one fault_memory_back FAIL "GPU memory used ${mem0} MiB before the faults, ${mem1} MiB after"
    fi
    grep -h "aborting\|is gone" "$LOGS"/server-one.log | tail -3
    if fits 15; then
        rm -f "$WORK/busbw.id"
        busbw one after_faults 256 1 && shell_row one serves_after_faults PASS "bus bandwidth sweep ran on the same server after the faults"
    else skip one serves_after_faults; fi
}
tcp_ceiling() { # the veth's raw TCP ceiling between the two "hosts" (rgpu-bench-tcp, rgpu's tcp)
    local sp v
    LD_LIBRARY_PATH=$DEPS "$IP" netns exec rgpu-h1 env LD_LIBRARY_PATH="$DEPS" timeout 40 \
        "$B/bin/rgpu-bench-tcp" server 10.88.0.2:$((P2 + 5)) >"$LOGS/tcp.server.out" 2>&1 &
    sp=$!
    sleep 0.5
    LD_LIBRARY_PATH=$DEPS "$IP" netns exec rgpu-h0 env LD_LIBRARY_PATH="$DEPS" timeout 30 \
        "$B/bin/rgpu-bench-tcp" client 10.88.0.2:$((P2 + 5)) >"$LOGS/tcp.two.out" 2>&1
    kill "$sp" 2>/dev/null
    wait "$sp" 2>/dev/null
    v=$(python3 -c 'import json,sys
d={}
for l in open(sys.argv[1]):
    try: j=json.loads(l); d[j["bench"]]=j
    except Exception: pass
s=d.get("tcp_send"); r=d.get("tcp_recv")
print(json.dumps({"name":"tcp_ceiling","send":s and s["value"],"recv":r and r["value"],"unit":s and s["unit"]}))' "$LOGS/tcp.two.out" 2>/dev/null)
    [ -n "$v" ] && echo "METRIC $v" >>"$LOGS/shell.two.out" && echo "veth TCP ceiling: $v"
}
step_twojax() { # JAX with every GPU in one process over the two servers (also a step alone)
    have two || return 0
    if fits 40; then DIST_JAX_PPERMUTE=0 single two jax 90 python3 "$ROOT/tests/gpu/dist_jax.py" local; else skip two jax; fi
}
step_two() { # two servers in network namespaces
    have two || return 0
    if fits 5; then tcp_ceiling; fi
    if fits 40; then ranks two torch 120 "$NGPU" "$ROOT/tests/gpu/dist_torch.py"; else skip two torch; fi
    if fits 20; then busbw two 1 64 3; else skip two busbw_round1; fi
    step_twojax
    if fits 20; then single two single 60 python3 "$ROOT/tests/gpu/dist_single.py"; else skip two single; fi
    if fits 50; then
        fault two fault_kill_server 20 server
        start_h 1 # the next jobs have both "hosts" again
        sleep 2
    else skip two fault_kill_server; fi
}
step_vmm() { # the VMM allocator
    for pl in native one; do
        if fits 30; then
            PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ranks $pl vmm 90 "$NGPU" \
                "$ROOT/tests/gpu/dist_torch.py" --phases coll,ddp --prefix vmm_
        else skip $pl vmm; fi
    done
}
jaxdist() { # placement: jax.distributed across 2 processes
    local pl=$1 pids=() rc=0 port=$((MPORT + 50)) to
    to=$(cap 75)
    pre "$pl"
    for p in 1 0; do
        local sel=() uns=() srv=$ONE
        if [ "$pl" = two ]; then # each process the server of its own "host"
            srv=$(echo "$TWO" | cut -d, -f$((p + 1)))
            uns=(-u CUDA_VISIBLE_DEVICES)
        elif [ "$NGPU" = 2 ]; then sel=(CUDA_VISIBLE_DEVICES=$p)
        else sel=(CUDA_VISIBLE_DEVICES=$((2 * p)),$((2 * p + 1))); fi
        env "${uns[@]}" "${PRE[@]}" "${sel[@]}" RGPU_SERVER="$srv" DIST_COORD=127.0.0.1:$port \
            DIST_NPROC=2 DIST_PID=$p timeout -k 5 "$to" python3 "$ROOT/tests/gpu/dist_jax.py" multi \
            >"$LOGS/jaxdist.$pl.p$p.out" 2>"$LOGS/jaxdist.$pl.p$p.err" &
        pids+=($!)
    done
    for q in "${pids[@]}"; do wait "$q" || rc=$?; done
    cp "$LOGS/jaxdist.$pl.p0.out" "$LOGS/jaxdist.$pl.out"
    [ $rc = 0 ] || shell_row "$pl" jaxdist FAIL "exit $rc: $(grep -v '^\s*$' "$LOGS/jaxdist.$pl.p0.err" | tail -1 | cut -c1-200)"
    grep '^ROW' "$LOGS/jaxdist.$pl.out" | sed "s/^/[$pl] /"
}
step_jaxdist() {
    for pl in native one two; do
        have $pl || continue
        if fits 30; then jaxdist $pl; else skip $pl jaxdist; fi
    done
}
for step in $STEPS; do
    echo "== $step ($(elapsed) s)"
    "step_$step"
done

# ---- the table ----------------------------------------------------------------------------------
echo
python3 "$ROOT/tests/gpu/dist_report.py" "$LOGS" "$NGPU" | tee "$OUTD/dist-table.md"
echo "($(elapsed) s)"
tar -C /tmp -czf "$OUTD/dist-logs.tar.gz" rgpu-dist-logs 2>/dev/null
exit 0
