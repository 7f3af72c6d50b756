#!/bin/bash
# End to end without a GPU: nvcc-built programs (static and shared cudart) run through the real
# client -> TCP -> gpu-server -> fake driver (tests/fakecuda), plus the fault cases.
# Usage: run_programs.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
SERVER=$BUILD/bin/gpu-server
FAKE=$BUILD/tests/fakecuda/libfakecuda.so
PROGS=$BUILD/tests/programs
TOOLS=$BUILD/tests/integration
WORK=$(mktemp -d)
export LD_LIBRARY_PATH=$BUILD/lib
# RGPU_TEST_TRANSPORT=rdma: the same suite with every client session moved to RDMA on
# tests/fakeverbs (clients require rdma; the server offers it, and still serves the raw-socket
# checks, which ask for tcp, on TCP).
VERBS_PATH=""
FAKEVERBS_DIR=""
if [ "${RGPU_TEST_TRANSPORT:-tcp}" = rdma ]; then
    VERBS_PATH=$BUILD/tests/fakeverbs/lib
    FAKEVERBS_DIR=$(mktemp -d /tmp/fakeverbs.XXXXXX)
    export FAKEVERBS_DIR RGPU_TRANSPORT=rdma LD_LIBRARY_PATH=$VERBS_PATH:$LD_LIBRARY_PATH
fi
FAILS=0
PIDS=()

cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$WORK" ${FAKEVERBS_DIR:+"$FAKEVERBS_DIR"}; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }

# start_server NAME -> sets PORT and SERVER_PID; log in $WORK/NAME.log
start_server() {
    PORT=$(free_port)
    "$SERVER" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" --log-level info \
        >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "gpu-server did not start:"; cat "$WORK/$1.log"; exit 1
}

run_program() { # name args...
    local name=$1; shift
    if timeout 300 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" && grep -q PASS "$WORK/$name.out"; then
        ok "$name"
    else
        fail "$name (exit $?)"; sed 's/^/    /' "$WORK/$name.out" "$WORK/$name.err" | tail -20
    fi
}

# The nvcc-built programs each run as a ctest of their own (program.sh, on the server of
# fixture.sh); what follows checks the rest against a server of its own.
start_server main
export RGPU_SERVER=127.0.0.1:$PORT

# The other two ways in: LD_PRELOAD (no library path) and `rgpu run --`.
if (export LD_LIBRARY_PATH=$VERBS_PATH; LD_PRELOAD=$BUILD/lib/libcuda.so.1 timeout 60 "$PROGS/vadd_shared" | grep -q PASS) &&
    (export LD_LIBRARY_PATH=$VERBS_PATH; timeout 60 "$BUILD/bin/rgpu" run -- "$PROGS/ptx_driver_static" | grep -q PASS); then
    ok "LD_PRELOAD and rgpu run"
else
    fail "LD_PRELOAD or rgpu run"
fi

# RGPU_STATS=1 counts the calls on the wire: vadd's launch went asynchronously, its frees waited.
RGPU_STATS=1 timeout 60 "$PROGS/vadd_shared" >/dev/null 2>"$WORK/stats.err"
if grep -Eq '^rgpu stats: LAUNCH +0 +0.000 +1$' "$WORK/stats.err" &&
    grep -Eq '^rgpu stats: MEM_FREE +3 ' "$WORK/stats.err"; then
    ok "RGPU_STATS: calls per operation at exit"
else
    fail "RGPU_STATS"; cat "$WORK/stats.err"
fi
# Kernel parameter layouts come from the image (client/api/image_params.c): vadd's kernel, in an
# nvcc fatbin, is launched without asking the worker for its layout; RGPU_LAYOUT_CHECK=1 asks
# anyway and compares (here with the fake driver's table of what nvcc emits). ptx_driver loads
# PTX, which describes no layout: its kernels' layouts are asked.
RGPU_STATS=1 RGPU_LAYOUT_CHECK=1 RGPU_LOG_LEVEL=info timeout 60 "$PROGS/vadd_shared" >/dev/null \
    2>"$WORK/layout.err"
if grep -q 'layout check: _Z4vaddPKfS0_Pfi: 4 parameters, as the driver says' "$WORK/layout.err" &&
    ! grep -q 'layout check: .*the image says' "$WORK/layout.err" &&
    grep -Eq '^rgpu stats: FUNC_GET_PARAM_LAYOUT +1 ' "$WORK/layout.err"; then
    ok "kernel parameter layouts read from the image, as the driver gives them"
else
    fail "kernel parameter layouts from the image"; grep -E 'layout|PARAM' "$WORK/layout.err"
fi
RGPU_STATS=1 timeout 60 "$PROGS/vadd_shared" >/dev/null 2>"$WORK/layout.err"
RGPU_STATS=1 timeout 60 "$PROGS/ptx_driver_static" >/dev/null 2>"$WORK/layout_ptx.err"
if ! grep -q 'FUNC_GET_PARAM_LAYOUT' "$WORK/layout.err" &&
    grep -Eq '^rgpu stats: FUNC_GET_PARAM_LAYOUT +[1-9]' "$WORK/layout_ptx.err"; then
    ok "no layout round trip for a cubin's kernel; asked for a PTX one"
else
    fail "layout round trips"; grep PARAM "$WORK/layout.err" "$WORK/layout_ptx.err"
fi
# RGPU_WORKER_STATS=1 on the server: at the session's end the worker logs time per operation and
# which operations raised its peak RSS. vadd writes two 4 MiB inputs into (fake) device memory,
# which is the worker's own memory here: at least 8 MiB must be charged to some operation. The
# teardown line gives the pinned staging the session held (its two 8 MiB chunks), and the
# session is logged under the name RGPU_CLIENT_NAME gives.
MAIN_PORT=$PORT
RGPU_WORKER_STATS=1 start_server wstats
RGPU_CLIENT_NAME=vadd-named RGPU_SERVER=127.0.0.1:$PORT timeout 60 "$PROGS/vadd_shared" >/dev/null 2>&1
for _ in $(seq 50); do grep -q 'worker stats: .*raised' "$WORK/wstats.log" && break; sleep 0.1; done
raised=$(awk '/worker stats: .* raised the peak RSS by/{s += $(NF-1)} END{print int(s)}' "$WORK/wstats.log")
for _ in $(seq 50); do grep -q 'worker peak RSS' "$WORK/wstats.log" && break; sleep 0.1; done
if grep -Eq 'worker stats: LAUNCH +1 calls' "$WORK/wstats.log" && [ "${raised:-0}" -ge 8 ] &&
    grep -q 'client vadd-named pid' "$WORK/wstats.log" &&
    grep -q 'worker peak RSS [0-9.]* MiB, pinned staging 16.0 MiB' "$WORK/wstats.log"; then
    ok "RGPU_WORKER_STATS: time per operation, $raised MiB of peak RSS charged to operations; pinned staging and client name logged"
else
    fail "RGPU_WORKER_STATS"; grep 'worker stats' "$WORK/wstats.log"
fi
PORT=$MAIN_PORT
# Occupancy answers are cached until an attribute changes: ptx_driver asks 22 times, 3 go out.
RGPU_STATS=1 timeout 60 "$PROGS/ptx_driver_static" >/dev/null 2>"$WORK/occ.err"
if grep -Eq '^rgpu stats: OCC_MAX_BLOCKS +3 ' "$WORK/occ.err"; then
    ok "occupancy answers cached, dropped when an attribute is set"
else
    fail "occupancy cache"; grep OCC "$WORK/occ.err"
fi

# Device printf reaches the client's stdout, in order with the host's output.
# JIT options reach the driver and its logs come back: the fake's info log names the
# optimization level and line-info option the program gave, for a small image and for a large
# one sent by hash (twice: stored, then a cache hit).
if JIT_PRINT_LOG=1 timeout 60 "$PROGS/jit_options_static" >"$WORK/jit_log.out" 2>&1 &&
    [ "$(grep -c 'info log: fakecuda jit: optimization level 3, line info 1$' "$WORK/jit_log.out")" = 3 ]; then
    ok "JIT options and logs forwarded"
else
    fail "JIT options and logs forwarded"; cat "$WORK/jit_log.out"
fi
# Driver API: unsupported entry points, asynchronous errors, local answers, many threads.
run_program driver_api "$TOOLS/driver_api"
if [ "$(grep -c 'cuMemAllocManaged is not supported' "$WORK/driver_api.err")" = 1 ]; then
    ok "unsupported entry point logged once by name"
else
    fail "unsupported entry point log"; cat "$WORK/driver_api.err"
fi

# Virtual memory management and memory pools.
run_program vmm_pools "$TOOLS/vmm_pools"

# Pitched copies in every direction.
run_program copies_2d "$TOOLS/copies_2d"

# Pinned memory copies (one-sided on RDMA sessions): every size, direction and kind of pinning.
run_program pinned_copies "$TOOLS/pinned_copies"

# Mapped pinned host memory (client/bulk/host_mirror.c): XLA's redzone checker,
# p2pBandwidthLatencyTest's flag, copies in and out of mirrored memory, freeing, device pointers,
# a graph's host node after GPU work; each check in a process of its own. A launch that names no
# pinned memory sends nothing extra.
for check in jax p2p copies free attrs graph_host; do
    run_program "host_mirror_$check" env RGPU_STATS=1 "$TOOLS/host_mirror" "$check"
done
if grep -Eq '^rgpu stats: HOST_MIRROR_MAP +1 ' "$WORK/host_mirror_jax.err" &&
   grep -Eq '^rgpu stats: HOST_MIRROR_PUSH +0 +[0-9.]+ +2$' "$WORK/host_mirror_jax.err" &&
   grep -Eq '^rgpu stats: HOST_MIRROR_PULL +2 ' "$WORK/host_mirror_jax.err" &&
   grep -Eq '^rgpu stats: HOST_MIRROR_UNMAP +1 ' "$WORK/host_mirror_jax.err"; then
    ok "host_mirror: the redzone buffer mapped once, pushed twice, pulled twice, unmapped once"
else
    fail "host_mirror: mirror calls"; grep -E 'HOST_MIRROR' "$WORK/host_mirror_jax.err"
fi
run_program host_mirror_plain env RGPU_STATS=1 "$TOOLS/host_mirror" --plain
if grep -q '^rgpu stats: LAUNCH ' "$WORK/host_mirror_plain.err" &&
   ! grep -q 'HOST_MIRROR' "$WORK/host_mirror_plain.err"; then
    ok "host_mirror: a launch on device memory only sends no mirror call"
else
    fail "host_mirror: plain launch"; cat "$WORK/host_mirror_plain.err"
fi
# Asynchronous copies over the data lanes return once sent (RGPU_STATS counts them as calls
# that did not wait; on RDMA there are no lanes and they are ordinary copies).
run_program lanes_async env RGPU_LANES=4 RGPU_STATS=1 "$TOOLS/lanes_async"
if [ -n "$VERBS_PATH" ] || grep -Eq '^rgpu stats: MEMCPY_HTOD_LANES +[0-9]+ +[0-9.]+ +[1-9]' "$WORK/lanes_async.err"; then
    ok "lanes_async: asynchronous lane copies did not wait ($(sed -n 's/^async 64 MiB HtoD: //p' "$WORK/lanes_async.out"))"
else
    fail "lanes_async: asynchronous lane copies"; grep -E 'LANES|operation' "$WORK/lanes_async.err"
fi

# CUDA IPC between two client processes of this server (the importer is a second program with
# its own session): memory and an interprocess event shared both ways; forged handles refused
# and logged. Tenants' isolation: tests/worker/ipc_tenants.sh.
run_program ipc "$TOOLS/ipc"
if grep -q "refused to open a CUDA IPC memory handle that no live session of this server exported" "$WORK/main.log"; then
    ok "forged IPC handle refused and logged by the server"
else
    fail "forged IPC handle not logged"; grep -i ipc "$WORK/main.log" | tail -5
fi

# CUDA arrays, texture and surface objects; objects left behind are freed at session end.
run_program arrays "$TOOLS/arrays" --rgpu
run_program arrays_leak "$TOOLS/arrays" --leak
sleep 0.5
if grep -q "destroyed 2 texture/surface object(s) and 1 array(s)" "$WORK/main.log"; then
    ok "arrays and texture/surface objects left by a client freed at session end"
else
    fail "arrays left by a client not freed"; grep -E "destroyed|freed" "$WORK/main.log" | tail -3
fi

# Tensor maps encoded by the worker's driver (cuTensorMapEncode*, cuTensorMapReplaceAddress).
run_program tensor_maps env RGPU_STATS=1 "$TOOLS/tensor_maps"
# Six encodings, one of them a repeat answered from the client's memo: five round trips.
if grep -Eq '^rgpu stats: TENSOR_MAP_ENCODE +5 ' "$WORK/tensor_maps.err"; then
    ok "tensor_maps: a repeated encoding costs no round trip"
else
    fail "tensor_maps: encode round trips"; grep -E 'TENSOR_MAP' "$WORK/tensor_maps.err"
fi

# Local answers and asynchronous setters: 101 cuCtxGetLimit calls make 4 round trips (first
# read, after a set, the stack size before and after a launch), the 52 cuFuncSetAttribute
# calls that pass the client's checks none, the 51 synchronous HtoD copies from pageable
# memory none.
run_program local_answers env RGPU_STATS=1 "$TOOLS/local_answers"
if grep -Eq '^rgpu stats: CTX_GET_LIMIT +4 ' "$WORK/local_answers.err" &&
   grep -Eq '^rgpu stats: FUNC_SET_ATTRIBUTE +0 +[0-9.]+ +52$' "$WORK/local_answers.err" &&
   grep -Eq '^rgpu stats: MEMCPY_HTOD +0 +[0-9.]+ +51$' "$WORK/local_answers.err" &&
   grep -Eq '^rgpu stats: MODULE_UNLOAD +0 +[0-9.]+ +1$' "$WORK/local_answers.err"; then
    ok "local_answers: limits from the client's cache, setters and unloads without a round trip"
else
    fail "local_answers: round trips"; grep -E 'LIMIT|ATTRIBUTE|operation' "$WORK/local_answers.err"
fi
if ! grep -q "cuMemHostGetDevicePointer" "$WORK/local_answers.err" &&
   grep -q "warn: cuMemAllocManaged.* is not supported" "$WORK/local_answers.err"; then
    ok "local_answers: a probe's refusal is not a warning, another refusal is"
else
    fail "local_answers: warnings"; grep -E "not supported" "$WORK/local_answers.err"
fi

# NVRTC's compile cache (client/api/compute_cache.c): the toolkit's NVRTC, run twice with one cache
# directory, misses and stores the first time (its second round of the same sources hits), hits
# every lookup the second time, with the same outputs; with CUDA_CACHE_DISABLE=1 nothing hits.
if [ -x "$TOOLS/nvrtc_cache" ]; then
    cc_run() { # name env...
        local name=$1; shift
        run_program "$name" env CUDA_CACHE_PATH="$WORK/compute-cache" RGPU_STATS=1 "$@" \
            "$TOOLS/nvrtc_cache" >&2
        sed -n 's/^rgpu stats: compute cache (NVRTC): \([0-9]*\) hits, \([0-9]*\) misses$/\1 \2/p' \
            "$WORK/$name.err" | grep . || echo "0 0"
    }
    cold=$(cc_run nvrtc_cold) warm=$(cc_run nvrtc_warm) off=$(cc_run nvrtc_off CUDA_CACHE_DISABLE=1)
    if [ "${cold##* }" -gt 0 ] && [ "${warm##* }" = 0 ] &&
       [ "${warm%% *}" = $((${cold%% *} + ${cold##* })) ] && [ "${off%% *}" = 0 ] &&
       [ "$(ls "$WORK/compute-cache/rgpu" | wc -l)" = "${cold##* }" ] &&
       cmp -s "$WORK/nvrtc_cold.out" "$WORK/nvrtc_warm.out"; then
        ok "nvrtc compile cache: cold $cold, warm $warm, disabled $off (hits misses), same outputs"
    else
        fail "nvrtc compile cache: cold '$cold', warm '$warm', disabled '$off' (hits misses)"
        diff "$WORK/nvrtc_cold.out" "$WORK/nvrtc_warm.out" | head
    fi
fi

# No server reachable: a clear error naming the address, quickly, never a hang.
if RGPU_SERVER=127.0.0.1:1 timeout 20 "$PROGS/vadd_static" >"$WORK/noserver.out" 2>&1; then
    fail "no server: the program succeeded"
elif grep -q "cannot reach gpu-server at 127.0.0.1:1" "$WORK/noserver.out"; then
    ok "no server: clean error naming 127.0.0.1:1"
else
    fail "no server: unexpected output"; cat "$WORK/noserver.out"
fi

# A client that dies while holding memory: its worker exits and frees it.
"$TOOLS/hold_memory" 256 >"$WORK/hold.out" 2>&1 &
HOLD=$!
PIDS+=("$HOLD")
for _ in $(seq 100); do grep -q ready "$WORK/hold.out" && break; sleep 0.1; done
kill -9 "$HOLD"; wait "$HOLD" 2>/dev/null
sleep 1
if grep -q "ready" "$WORK/hold.out" && grep -Eq "ended.*(disconnect|closed)|freed" "$WORK/main.log"; then
    ok "dead client: worker ended and freed its memory ($(grep -Eo 'freed[^;]*' "$WORK/main.log" | tail -1))"
else
    fail "dead client"; tail -5 "$WORK/hold.out" "$WORK/main.log"
fi

# A malformed message ends only its own session; a concurrent session keeps working.
"$TOOLS/hold_memory" 16 10 >"$WORK/bystander.out" 2>&1 &
BY=$!
python3 - "$PORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\xff" * 64)
s.settimeout(10)
try:
    s.recv(100)
except OSError:
    pass
PY
if wait "$BY" && grep -q "PASS" "$WORK/bystander.out" && grep -qi "malformed" "$WORK/main.log"; then
    ok "malformed message: that session ended ($(grep -i malformed "$WORK/main.log" | head -1 | cut -c1-120)), the other passed"
else
    fail "malformed message"; cat "$WORK/bystander.out"; grep -i malformed "$WORK/main.log"
fi

# Protocol checks from a raw socket: a version mismatch is refused naming both versions; an
# oversized message after a good handshake ends that session with a log line. The raw Hellos
# speak this build's version (proto/frame.h's minor: a server serves only recent minors).
PROTO_MINOR=$(sed -n 's/^#define PROTO_VERSION_MINOR  *\([0-9]*\)u.*/\1/p' "$(dirname "$0")/../../proto/frame.h")
python3 - "$PORT" "$PROTO_MINOR" >"$WORK/proto.out" 2>&1 <<'PY'
import socket, struct, sys
port, minor = int(sys.argv[1]), int(sys.argv[2])
def frame(ftype, msg, bulk_len=0, msg_len=None):
    n = len(msg) if msg_len is None else msg_len
    return struct.pack("<IHHIIQ", 0x55504752, ftype, 0, n, 0, bulk_len) + msg
def read_frame(s):
    hdr = b""
    while len(hdr) < 24:
        chunk = s.recv(24 - len(hdr))
        if not chunk:
            return None
        hdr += chunk
    magic, ftype, flags, n, _, bulk = struct.unpack("<IHHIIQ", hdr)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    return ftype, body
s = socket.create_connection(("127.0.0.1", port))
s.sendall(frame(1, bytes([0x08, 99])))          # Hello{proto_version = 99}
ftype, body = read_frame(s)
print("mismatch:", body.decode("latin1"))
s = socket.create_connection(("127.0.0.1", port))
s.sendall(frame(1, bytes([0x08, 1, 0x58, minor])))  # Hello{proto_version = 1, proto_minor}
ftype, body = read_frame(s)
print("welcome type", ftype)
s.sendall(frame(3, b"", msg_len=64 << 20))      # a Call claiming a 64 MiB message
s.settimeout(10)
print("after oversized:", read_frame(s))
PY
sleep 0.5
if grep -q "client speaks 99, server speaks 1" "$WORK/proto.out" &&
    grep -q "after oversized: None" "$WORK/proto.out" && grep -q "oversized" "$WORK/main.log"; then
    ok "version mismatch refused naming both versions; oversized message ended its session"
else
    fail "protocol checks"; cat "$WORK/proto.out"; grep -i "oversized\|mismatch" "$WORK/main.log"
fi

# A one-sided copy named on a TCP session is refused (NOT_SUPPORTED) without touching anything,
# and the session goes on.
python3 - "$PORT" "$(dirname "$0")/../../proto/ops.def" "$PROTO_MINOR" >"$WORK/rdma_on_tcp.out" 2>&1 <<'PY'
import re, socket, struct, sys
port, ops_def, minor = int(sys.argv[1]), open(sys.argv[2]).read(), int(sys.argv[3])
ops = re.findall(r"^([A-Z][A-Z0-9_]*)\s*\|", ops_def, re.M)  # the op table, in enum order
def varint(v):
    out = b""
    while True:
        b, v = v & 0x7f, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out
def call(cid, op, args):
    packed = b"".join(varint(a) for a in args)
    return (b"\x08" + varint(cid) + b"\x10" + varint(op) +
            (b"\x22" + varint(len(packed)) + packed if args else b""))
def frame(ftype, msg):
    return struct.pack("<IHHIIQ", 0x55504752, ftype, 0, len(msg), 0, 0) + msg
def read_frame(s):
    buf = b""
    while len(buf) < 24:
        chunk = s.recv(24 - len(buf))
        if not chunk:
            sys.exit("the server closed the connection")
        buf += chunk
    _, ftype, _, n, _, bulk = struct.unpack("<IHHIIQ", buf)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    return ftype, body
def result(body):  # Reply.result (field 2, sint32)
    i = 0
    while i < len(body):
        key, i = body[i], i + 1
        v = shift = 0
        while True:
            b, i = body[i], i + 1
            v |= (b & 0x7f) << shift
            shift += 7
            if not b & 0x80:
                break
        if key == 0x10:
            return (v >> 1) ^ -(v & 1)
    return 0
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(10)
s.sendall(frame(1, bytes([0x08, 1, 0x58, minor])))
print("welcome type", read_frame(s)[0])
s.sendall(frame(3, call(1, ops.index("MEMCPY_HTOD_RDMA"), [0, 1 << 20, 0, 0, 0x10000, 5])))
print("htod_rdma result", result(read_frame(s)[1]))
s.sendall(frame(3, call(2, ops.index("NOP"), [])))
print("nop result", result(read_frame(s)[1]))
PY
if grep -q "htod_rdma result 801" "$WORK/rdma_on_tcp.out" && grep -q "nop result 0" "$WORK/rdma_on_tcp.out" &&
    grep -q "MEMCPY_HTOD_RDMA on a session that does not run on RDMA" "$WORK/main.log"; then
    ok "one-sided copy on a TCP session: refused with NOT_SUPPORTED, the session goes on"
else
    fail "one-sided copy on a TCP session"; cat "$WORK/rdma_on_tcp.out"
fi

# The server dies mid-run: pending and later calls fail within a bounded time; also while
# asynchronous copies are on the data lanes.
for mode in plain lanes; do
    start_server dying-$mode
    RGPU_LANES=4 RGPU_SERVER=127.0.0.1:$PORT "$TOOLS/server_death" $mode >"$WORK/death.out" 2>&1 &
    VICTIM=$!
    for _ in $(seq 100); do grep -q running "$WORK/death.out" && break; sleep 0.1; done
    sleep 0.3
    pkill -9 -P "$SERVER_PID" 2>/dev/null; kill -9 "$SERVER_PID"
    if timeout 60 tail --pid="$VICTIM" -f /dev/null && wait "$VICTIM"; then
        ok "server death ($mode): $(tail -1 "$WORK/death.out")"
    else
        fail "server death ($mode)"; cat "$WORK/death.out"
    fi
done

# Large pinned copies went one-sided on RDMA (the worker's count for the pinned_copies session
# equals what the program expects), and never on TCP.
want=$(sed -n 's/^expect one-sided: //p' "$WORK/pinned_copies.out")
sid=$(sed -n 's/.*session \([0-9]*\): client pinned_copies .*/\1/p' "$WORK/main.log" | head -1)
got=$(sed -n "s/.*session $sid: one-sided copies: //p" "$WORK/main.log")
if [ -z "$VERBS_PATH" ]; then
    if ! grep -q "one-sided copies" "$WORK/main.log"; then
        ok "tcp: no copy went one-sided"
    else
        fail "tcp: one-sided copies on a TCP session"; grep "one-sided" "$WORK/main.log"
    fi
elif [ -n "$want" ] && [ "$got" = "$want" ]; then
    ok "rdma: pinned copies one-sided: $got"
else
    fail "rdma: one-sided copies of session $sid: '$got', expected '$want'"
fi

if [ -n "$VERBS_PATH" ]; then # every program's session really ran on RDMA
    n=$(grep -c "transport rdma" "$WORK/main.log")
    if [ "$n" -ge 10 ] && ! grep -q "transport tcp (the client" "$WORK/main.log"; then
        ok "rdma: $n sessions moved to RDMA"
    else
        fail "rdma: only $n sessions moved to RDMA"; grep "transport" "$WORK/main.log" | head
    fi
fi

echo "$FAILS failure(s)"
[ "$FAILS" -eq 0 ]
