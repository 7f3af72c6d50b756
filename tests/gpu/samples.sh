#!/bin/bash
# NVIDIA's cuda-samples as an acceptance suite: built here (the GPU host has no compilers), run on
# the GPU host natively and through rgpu, outputs compared.
#
#   samples.sh build CUDA_SAMPLES_DIR OUTDIR
#       Builds every sample of tests/gpu/samples_list.txt for sm_90 with the samples' own CMake
#       files (their defaults: static cudart unless a sample links CUDA::cudart), stages each in
#       OUTDIR/stage/NAME/ with the files it reads at run time (fatbins, PTX, kernel sources for
#       NVRTC, data/), strips it, and packs OUTDIR/samples.tar.xz. OUTDIR/build.txt says what
#       was built and what failed, and why.
#   samples.sh run DIR
#       DIR is the GPU bundle (tests/gpu/bundle.sh puts samples.tar.xz there). Starts its own
#       gpu-server on 127.0.0.1:$SAMPLES_PORT, runs each sample natively and through rgpu (the
#       client's libcuda.so.1 first in LD_LIBRARY_PATH) from the sample's own directory, and
#       prints one row per sample: PASS, FAIL, XFAIL (refused by design, as the list expects) or
#       SKIP (waived or failing natively, not built, out of time). Rows are also appended, tab
#       separated, to $SAMPLES_ROWS when set (tests/gpu/run.sh reads them). The samples are
#       those the bundle holds; what each must do comes from the list ($SAMPLES_LIST, else
#       samples_list.txt here) when it names it. SAMPLES_ONLY="A B": only those samples.
#   samples.sh check OUTDIR [CLIENT_LIBCUDA]
#       What can be checked without a GPU, per staged sample: how it reaches CUDA (static or
#       shared cudart, driver API only), the device code it carries or loads (sm_/ptx_ from the
#       fatbin headers: this toolkit has no cuobjdump), the libraries it needs, and the APIs in
#       its sources that rgpu refuses or does not implement. With rgpu's libcuda.so.1, also the
#       driver entry points the sample reaches (imported, or behind the runtime calls in its
#       sources) that are still the client's generated NOT_SUPPORTED stubs. To OUTDIR/check.txt.
#   samples.sh selftest
#       Checks the output comparison on canned outputs (no GPU needed).
#
# Comparison: stdout only; hex values are masked and lines with timings, rates or throughput
# are dropped. Equal → PASS. Otherwise the sample runs natively a second time and lines that
# differ between the two native runs (iteration counts, clocks) are ignored.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
LIST=${SAMPLES_LIST:-$HERE/samples_list.txt}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

die() { echo "samples.sh: $*" >&2; exit 1; }

# Entries of a list file: NAME PATH EXPECT [ARGS...], comments and blank lines dropped.
list_entries() { grep -vE '^[[:space:]]*(#|$)' "$1"; }

# ---------------------------------------------------------------------------- build
stage_sample() { # name path src tree_build stage
    local name=$1 path=$2 src=$3 bdir=$4/$2 dst=$5/$1
    mkdir -p "$dst"
    cp "$bdir/$name" "$dst/" && strip --strip-unneeded "$dst/$name" || return 1
    # What the sample's CMake file put beside the executable: fatbins, cubins, PTX, kernel
    # sources for NVRTC, matrices, images (POST_BUILD copies).
    find "$bdir" -maxdepth 1 -type f ! -name "$name" ! -name Makefile ! -name '*.cmake' \
        -exec cp {} "$dst/" \;
    if [ -d "$src/$path/data" ]; then cp -r "$src/$path/data" "$dst/"; fi
}

# Libraries the staged samples need beyond glibc, the C++ runtime, the driver and the toolkit's
# own (the GPU host has those in $CUDA_HOME/lib64), e.g. libgomp: into STAGE/_lib.
stage_libraries() { # stage
    local lib
    mkdir -p "$1/_lib"
    for f in "$1"/*/*; do
        [ -x "$f" ] && [ -f "$f" ] && ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
    done | sort -u | while read -r lib; do
        case $lib in "$CUDA_HOME"/* | /usr/local/cuda*) continue ;; esac
        case $(basename "$lib") in
            libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
            libgcc_s.so.* | libstdc++.so.* | libcuda.so.*) ;;
            *) cp -L "$lib" "$1/_lib/" ;;
        esac
    done
}

build_samples() { # CUDA_SAMPLES_DIR OUTDIR
    local src out tree jobs name path rest built=0 failed=0
    src=$(cd "$1" && pwd) || die "no samples tree at $1"
    [ -d "$src/Common" ] && [ -d "$src/Samples" ] || die "$src is not a cuda-samples tree"
    mkdir -p "$2" && out=$(cd "$2" && pwd)
    tree=$out/src
    rm -rf "$tree" "$out/stage" "$out/samples.tar.xz"
    mkdir -p "$tree" "$out/stage"
    cp -r "$src/Common" "$tree/"
    [ -d "$src/cmake" ] && cp -r "$src/cmake" "$tree/"
    {
        echo 'cmake_minimum_required(VERSION 3.20)'
        echo 'project(rgpu_cuda_samples LANGUAGES C CXX CUDA)'
        echo 'find_package(CUDAToolkit REQUIRED)'
    } >"$tree/CMakeLists.txt"
    while read -r name path rest; do
        [ -f "$src/$path/CMakeLists.txt" ] || die "$name: no $path/CMakeLists.txt in $src"
        mkdir -p "$tree/$(dirname "$path")"
        cp -r "$src/$path" "$tree/$path"
        # The samples hard-code nine architectures; the GPU host is an H100.
        sed -i -E 's/set\(CMAKE_CUDA_ARCHITECTURES[^)]*\)/set(CMAKE_CUDA_ARCHITECTURES 90)/' \
            "$tree/$path/CMakeLists.txt"
        echo "add_subdirectory($path)" >>"$tree/CMakeLists.txt"
    done < <(list_entries "$LIST")

    # No build-tree RUNPATH (it would name this machine's paths); the toolkit's libraries
    # (cuBLAS, cuFFT, NVRTC...) are found in the GPU host's $CUDA_HOME/lib64.
    cmake -S "$tree" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCMAKE_SKIP_BUILD_RPATH=ON \
        -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath,$CUDA_HOME/lib64" >"$out/configure.log" 2>&1 ||
        die "configure failed, see $out/configure.log"
    jobs=$(nproc)
    cmake --build "$out/build" -j "$jobs" -- -k >"$out/build.log" 2>&1
    : >"$out/build.txt"
    : >"$out/stage/samples_list.txt"
    while read -r name path rest; do
        if [ -x "$out/build/$path/$name" ] && stage_sample "$name" "$path" "$src" "$out/build" "$out/stage"; then
            echo "$name $path $rest" >>"$out/stage/samples_list.txt"
            echo "built  $name" >>"$out/build.txt"
            built=$((built + 1))
        else
            echo "failed $name: $( (grep -F "$path" "$out/build.log" | grep -iE -m1 'error' || echo 'see build.log') | cut -c1-200)" \
                >>"$out/build.txt"
            echo "$name $path" >>"$out/stage/not_built.txt"
            failed=$((failed + 1))
        fi
    done < <(list_entries "$LIST")
    stage_libraries "$out/stage"
    tar -C "$out/stage" -cf - . | xz -9e -T0 >"$out/samples.tar.xz" || die "packing failed"
    echo "built $built, failed $failed (see $out/build.txt); $(du -h "$out/samples.tar.xz" | cut -f1) packed in $out/samples.tar.xz"
}

# ---------------------------------------------------------------------------- check
# Architectures of the device code in files (executables, .fatbin): every fatbin header
# (magic 0xBA55ED50) and its entries' kind and arch fields.
device_archs() {
    python3 - "$@" <<'PY'
import struct, sys
for path in sys.argv[1:]:
    data, found = open(path, "rb").read(), set()
    pos = data.find(b"\x50\xed\x55\xba")
    while 0 <= pos <= len(data) - 16:
        _, ver, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        e, end = pos + hsize, min(pos + hsize + fsize, len(data))
        while ver == 1 and hsize == 16 and e + 32 <= end:
            kind, _, ehs, size = struct.unpack_from("<HHIQ", data, e)
            if kind not in (1, 2, 16) or ehs < 32 or size == 0:
                break
            found.add({1: "ptx", 2: "sm", 16: "ltoir"}[kind] + "_%d" % struct.unpack_from("<I", data, e + 28))
            e += ehs + size
        pos = data.find(b"\x50\xed\x55\xba", pos + 4)
    print(",".join(sorted(found)) or "none")
PY
}

# API names in a sample's sources that rgpu refuses by design or does not serve (yet).
NOTABLE='cudaHostGetDevicePointer|cudaHostAllocMapped|cudaHostRegisterMapped|cuMemHostGetDevicePointer|cudaMallocManaged|__managed__|cuMemAllocManaged|cudaIpc[A-Za-z]+|cuIpc[A-Za-z]+|cuMemCreate|cuMemMap|cuMemExportToShareableHandle|cudaLaunchCooperativeKernel|cuLaunchCooperativeKernel|cudaMalloc3?D?Array|cuArray3?D?Create|cudaCreateTextureObject|cuTexObjectCreate|cudaCreateSurfaceObject|cudaMemcpy[23]D[A-Za-z]*|cuMemcpy[23]D|cudaMallocPitch|cuLinkCreate|cudaGraphCreate|cudaGraphAdd[A-Za-z]+Node|cudaGraphConditionalHandleCreate|cudaMallocAsync|cudaMemPool[A-Za-z]+|cudaDeviceEnablePeerAccess|fork\('

# Runtime API calls and the driver entry points cudart serves them with (for the stub check).
RUNTIME_TO_DRIVER='
cudaMallocManaged cuMemAllocManaged
cudaMallocArray cuArrayCreate_v2
cudaMalloc3DArray cuArray3DCreate_v2
cudaMallocMipmappedArray cuMipmappedArrayCreate
cudaCreateTextureObject cuTexObjectCreate
cudaCreateSurfaceObject cuSurfObjectCreate
cudaMemcpy2D cuMemcpy2DUnaligned_v2
cudaMemcpy2DToArray cuMemcpy2DUnaligned_v2
cudaMemcpy3D cuMemcpy3D_v2
cudaMallocPitch cuMemAllocPitch_v2
cudaLaunchCooperativeKernel cuLaunchCooperativeKernel
cudaGraphCreate cuGraphCreate
cudaGraphAddKernelNode cuGraphAddKernelNode_v2
cudaGraphAddMemcpyNode cuGraphAddMemcpyNode
cudaGraphAddMemsetNode cuGraphAddMemsetNode
cudaGraphAddHostNode cuGraphAddHostNode
cudaGraphAddMemAllocNode cuGraphAddMemAllocNode
cudaGraphAddMemFreeNode cuGraphAddMemFreeNode
cudaGraphAddNode cuGraphAddNode_v2
cudaGraphConditionalHandleCreate cuGraphConditionalHandleCreate
cudaDeviceGetGraphMemAttribute cuDeviceGetGraphMemAttribute
cudaDeviceGraphMemTrim cuDeviceGraphMemTrim
cudaGraphExecUpdate cuGraphExecUpdate_v2
cudaGraphClone cuGraphClone
cudaMallocAsync cuMemAllocAsync
cudaMemPoolSetAttribute cuMemPoolSetAttribute
cudaDeviceGetDefaultMemPool cuDeviceGetDefaultMemPool
cudaIpcGetMemHandle cuIpcGetMemHandle
cudaIpcOpenMemHandle cuIpcOpenMemHandle_v2
cudaIpcGetEventHandle cuIpcGetEventHandle
cudaHostGetDevicePointer cuMemHostGetDevicePointer_v2
cudaHostRegister cuMemHostRegister_v2
cudaStreamAttachMemAsync cuStreamAttachMemAsync
cudaMemPrefetchAsync cuMemPrefetchAsync_v2
cudaMemAdvise cuMemAdvise_v2
cudaDeviceEnablePeerAccess cuCtxEnablePeerAccess
cudaStreamBeginCapture cuStreamBeginCapture_v2
cudaGraphInstantiate cuGraphInstantiateWithFlags
cudaGraphLaunch cuGraphLaunch
cudaLaunchHostFunc cuLaunchHostFunc
cudaStreamAddCallback cuStreamAddCallback
cudaDeviceSetLimit cuCtxSetLimit
cudaFuncGetAttributes cuFuncGetAttribute
cudaMemset2D cuMemsetD2D8_v2
cudaStreamCreateWithPriority cuStreamCreateWithPriority
'

# Driver entry points a staged sample reaches that the client only has as NOT_SUPPORTED stubs.
client_stubs_reached() { # out path name stubs-file
    local bin=$1/build/$2/$3
    {
        nm -D --undefined-only "$bin" 2>/dev/null | awk '{sub(/@.*/, "", $2); print $2}'
        cat "$1/src/$2"/*.c* "$1/src/$2"/*.h* 2>/dev/null | grep -oE '\bcuda[A-Z][A-Za-z0-9]+' | sort -u |
            awk 'NR == FNR { if (NF == 2) map[$1] = $2; next } $1 in map { print map[$1] }' \
                <(printf '%s' "$RUNTIME_TO_DRIVER") -
    } | grep -E '^cu[A-Z]' | sort -u | grep -Fxf "$4" | paste -sd' ' -
}

check_samples() { # OUTDIR [CLIENT_LIBCUDA]
    local out name path expect rest f rt libs apis stubs="" lacks=""
    out=$(cd "$1" && pwd) || die "no build output at $1"
    [ -f "$out/stage/samples_list.txt" ] || die "$out has no stage/ (run samples.sh build first)"
    if [ -n "${2:-}" ]; then
        stubs=$(mktemp)
        # The generated stubs are weak; the client's own entry points override them.
        nm -D --defined-only "$2" | awk '$2 == "W" { print $3 }' >"$stubs" || die "cannot read $2"
        [ -s "$stubs" ] || die "$2 has no weak stubs: not rgpu's client?"
    fi
    {
        printf '%-29s %-13s %-27s %-14s %-30s %s\n' SAMPLE CUDA EXPECT DEVICE-CODE LIBRARIES "NOTABLE APIS (sources)${stubs:+ | CLIENT STUBS REACHED}"
        while read -r name path expect rest; do
            f=$out/stage/$name/$name
            # Stripped: no symbols; static cudart leaves its error strings in the binary.
            if ldd "$f" | grep -q libcudart; then rt=shared-cudart
            elif ldd "$f" | grep -q libcuda; then rt=driver-api
            elif grep -qa cudaErrorInitializationError "$f"; then rt=static-cudart
            else rt=dlopen-driver; fi
            local code
            code=$(device_archs "$f" "$out/stage/$name"/*.fatbin 2>/dev/null | tr , '\n' | grep -v '^none$' | sort -u | paste -sd, -)
            # Dynamic parallelism links libcudadevrt, which carries every architecture.
            [[ $code == *sm_75* ]] && code="sm_90+devrt(all)"
            ls "$out/stage/$name"/*.ptx >/dev/null 2>&1 && code="${code:+$code,}ptx-file"
            ls "$out/stage/$name"/*.cu* >/dev/null 2>&1 && code="${code:+$code,}nvrtc-source"
            libs=$(ldd "$f" | awk '/=>/{print $1}' | grep -E 'cublas|cufft|curand|cusolver|cusparse|nvrtc|nvJitLink|gomp' |
                sed 's/\.so.*//; s/^lib//' | sort -u | paste -sd, -)
            apis=$(cat "$out/src/$path"/*.c* "$out/src/$path"/*.h* 2>/dev/null | grep -oE "\b($NOTABLE)" | sort -u | paste -sd' ' -)
            [ -n "$stubs" ] && lacks=" | $(client_stubs_reached "$out" "$path" "$name" "$stubs")"
            printf '%-29s %-13s %-27s %-14s %-30s %s\n' "$name" "$rt" "$expect" "${code:-none}" "${libs:--}" "${apis:--}$lacks"
        done < <(list_entries "$out/stage/samples_list.txt")
    } | tee "$out/check.txt"
    [ -n "$stubs" ] && rm -f "$stubs"
    return 0
}

# ---------------------------------------------------------------------------- compare
# Stable view of a sample's stdout: hex masked, lines with timings, rates and sizes per second
# dropped, trailing blanks trimmed.
VOLATILE='^(memcopy|kernel|non-streamed|[0-9]+ streams):[[:space:]]|[0-9.]+ ?(s|ms|msec|us|usec|sec|seconds)\b|\btime|\belapsed|throughput|bandwidth|[GMKT]B/s|[GMKT]Bytes/s|flop|gflops|tflops|perf|speedup|per second|/sec|iterations while|clocks|ops/s|samples/s|options/s|GPix'
normalize() { sed -E 's/0x[0-9a-fA-F]+/0x?/g; s/[[:space:]]+$//' "$1" | grep -viE "$VOLATILE"; }
# For samples listed "varies": every number masked too (what stays is the output's shape).
normalize_numbers() { normalize "$1" | sed -E 's/[0-9]+/N/g'; }

# Prints the first difference between a native and an rgpu output, nothing when they agree on
# every line that two native runs agree on. Arguments: native rgpu [native2].
compare_outputs() {
    local a b c
    a=$(normalize "$1"); b=$(normalize "$2")
    [ "$a" == "$b" ] && return 0
    if [ $# -lt 3 ]; then
        first_difference "$a" "$b"
        return 1
    fi
    c=$(normalize "$3")
    local na nb nc
    na=$(printf '%s\n' "$a" | wc -l); nb=$(printf '%s\n' "$b" | wc -l); nc=$(printf '%s\n' "$c" | wc -l)
    if [ "$na" -eq "$nb" ] && [ "$na" -eq "$nc" ]; then
        # Same shape: compare line by line where the two native runs agree.
        paste -d '\n' <(printf '%s\n' "$a") <(printf '%s\n' "$c") <(printf '%s\n' "$b") |
            awk 'NR % 3 == 1 { n1 = $0 } NR % 3 == 2 { n2 = $0 }
                 NR % 3 == 0 && n1 == n2 && $0 != n1 { printf "line %d: native \"%s\" rgpu \"%s\"\n", NR / 3, n1, $0; bad = 1; exit }
                 END { exit bad }'
        return $?
    fi
    # Different shapes: every line both native runs print must appear in rgpu's output, and
    # rgpu may print no failure or error line that no native run printed.
    local missing extra
    missing=$(grep -Fxvf <(printf '%s\n' "$b") <(grep -Fxf <(printf '%s\n' "$c") <(printf '%s\n' "$a")) | head -1)
    extra=$(grep -Fxvf <(printf '%s\n%s\n' "$a" "$c") <(printf '%s\n' "$b") | grep -iE 'fail|error|mismatch|wrong' | head -1)
    [ -z "$missing" ] && [ -z "$extra" ] && return 0
    [ -n "$missing" ] && echo "missing \"$missing\"" || echo "extra \"$extra\""
    return 1
}

first_difference() { # text-a text-b
    diff <(printf '%s\n' "$1") <(printf '%s\n' "$2") | awk '
        /^[0-9]/ { where = $0; next }
        /^</ { a = a ? a : substr($0, 3) } /^>/ { b = b ? b : substr($0, 3) }
        END { printf "at %s: native \"%s\" rgpu \"%s\"\n", where, a, b }'
}

# Why an rgpu run failed, from its exit status and stderr: timeout, signal, the first entry
# point the client does not support, or the last line it printed.
failure_reason() { # rc stderr-file limit
    local rc=$1 err=$2 unsup
    unsup=$(grep -oE '[A-Za-z0-9_]+ is not supported' "$err" | head -1)
    case $rc in
        124 | 137) echo "timed out after ${3}s${unsup:+ ($unsup)}"; return ;;
    esac
    [ "$rc" -gt 128 ] && { echo "killed by signal $((rc - 128))${unsup:+ ($unsup)}"; return; }
    [ -n "$unsup" ] && { echo "$unsup"; return; }
    echo "$(grep -v '^[[:space:]]*$' "$err" | tail -1 | cut -c1-160)"
}

# One verdict: STATUS<TAB>REASON. Arguments: expect rc-native rc-rgpu native-out rgpu-out
# rgpu-err rgpu-limit [native2-out].
verdict() {
    local expect=$1 rn=$2 rr=$3 n=$4 r=$5 rerr=$6 lim=$7 n2=${8:-} diffl
    if [ "$rn" -eq 2 ] && grep -qi waiv "$n"; then
        printf 'SKIP\twaived natively: %s\n' "$(grep -i -m1 waiv "$n" | cut -c1-100)"; return
    fi
    if [ "$rn" -ne 0 ]; then
        printf 'SKIP\tnative run failed (exit %s): %s\n' "$rn" "$(tail -1 "$n" | cut -c1-100)"; return
    fi
    if [ "$rr" -eq "$rn" ] && diffl=$(compare_outputs "$n" "$r" ${n2:+"$n2"}); then
        local what="same output ($(normalize "$r" | wc -l) lines compared)"
        [ "${expect%%:*}" == refused ] && what="$what; listed as ${expect}, works"
        printf 'PASS\t%s\n' "$what"; return
    fi
    if [ "$expect" == varies ] && [ "$rr" -eq "$rn" ] &&
        [ "$(normalize_numbers "$n")" == "$(normalize_numbers "$r")" ]; then
        printf 'PASS\tsame output with its numbers masked (%s lines; they vary between native runs)\n' \
            "$(normalize "$r" | wc -l)"
        return
    fi
    if [ "${expect%%:*}" == refused ] && [ "$rr" -ne 0 ] && [ "$rr" -lt 124 ] &&
        grep -qiE 'not[ _]?supported' "$rerr"; then
        printf 'XFAIL\trefused as expected (%s): %s\n' "${expect#refused:}" "$(failure_reason "$rr" "$rerr" "$lim")"
        return
    fi
    if [ "$rr" -ne "$rn" ]; then
        printf 'FAIL\texit native %s rgpu %s: %s\n' "$rn" "$rr" "$(failure_reason "$rr" "$rerr" "$lim")"
    else
        printf 'FAIL\toutput differs %s\n' "$diffl"
    fi
}

# ---------------------------------------------------------------------------- run
# The samples run are those the bundle holds (its list, written when they were built); their
# EXPECT and arguments come from $LIST when it names them, so an expectation can change
# without a rebuild. Sets expect and args.
expect_now() { # name
    local cur
    cur=$(list_entries "$LIST" 2>/dev/null | awk -v n="$1" '$1 == n { $1 = $2 = ""; sub(/^ +/, ""); print; exit }')
    [ -n "$cur" ] && read -r expect args <<<"$cur"
    return 0
}

run_samples() { # BUNDLE_DIR
    local B DEPS LOGS WORK PORT TN TR TREFUSED BUDGET start name path expect args
    B=$(cd "$1" && pwd) || die "no bundle at $1"
    DEPS=$B/deps
    LOGS=${OUT:-/tmp}/rgpu-gpu-logs/samples
    WORK=${SAMPLES_WORK:-/tmp/rgpu-samples}
    PORT=${SAMPLES_PORT:-7075}
    TN=${SAMPLES_TIMEOUT_NATIVE:-60}
    TR=${SAMPLES_TIMEOUT_RGPU:-120}
    TREFUSED=${SAMPLES_TIMEOUT_REFUSED:-30}
    BUDGET=${SAMPLES_BUDGET_S:-480}
    local -a ROWS=()
    emit() { # name status reason
        ROWS+=("$(printf '%-30s %-6s %s' "$1" "$2" "$3")")
        echo "$2 $1 $3"
        [ -n "${SAMPLES_ROWS:-}" ] && printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SAMPLES_ROWS"
        return 0
    }
    if [ ! -f "$B/samples.tar.xz" ]; then
        emit cuda-samples SKIP "no samples.tar.xz in $B (build with samples.sh build, then bundle.sh)"
        return 0
    fi
    command -v timeout >/dev/null || die "timeout (coreutils) is needed"
    rm -rf "$WORK" "$LOGS" && mkdir -p "$WORK" "$LOGS"
    if command -v xz >/dev/null; then
        tar -C "$WORK" -xJf "$B/samples.tar.xz"
    else # no xz-utils: Python's lzma
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
            "$B/samples.tar.xz" "$WORK"
    fi || die "cannot unpack $B/samples.tar.xz"

    LD_LIBRARY_PATH=$DEPS "$B/bin/gpu-server" --listen 127.0.0.1 --port "$PORT" --log-level info \
        >"$LOGS/server.log" 2>&1 &
    SAMPLES_SERVER_PID=$!
    trap 'kill "${SAMPLES_SERVER_PID:-}" 2>/dev/null' EXIT
    sleep 2
    kill -0 "$SAMPLES_SERVER_PID" 2>/dev/null || die "gpu-server did not start: $(tail -3 "$LOGS/server.log")"

    start=$(date +%s)
    while read -r name path expect args; do
        case " ${SAMPLES_ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
        expect_now "$name" # the list's current expectation, when it names the sample
        if [ $(($(date +%s) - start)) -ge "$BUDGET" ]; then
            emit "$name" SKIP "time budget of ${BUDGET}s spent (SAMPLES_BUDGET_S)"
            continue
        fi
        run_one "$name" "$expect" "$args"
    done < <(list_entries "$WORK/samples_list.txt")
    if [ -f "$WORK/not_built.txt" ]; then
        while read -r name path; do emit "$name" SKIP "not built (see build.txt of samples.sh build)"; done <"$WORK/not_built.txt"
    fi
    kill "$SAMPLES_SERVER_PID" 2>/dev/null
    echo
    echo "================ cuda-samples: native vs rgpu ================"
    printf '%s\n' "${ROWS[@]}"
    printf '%s\n' "${ROWS[@]}" | awk '{n[$2]++} END {printf "total %d:", NR; for (s in n) printf " %s %d", s, n[s]; print ""}'
}

# Runs a sample in its directory under a time limit; afterwards kills what it left behind in its
# process group (timeout makes one), e.g. children it forked that wait for a parent that failed.
run_limited() { # dir limit stdout stderr env-assignments... -- command args...
    local dir=$1 lim=$2 o=$3 e=$4 pid rc
    local -a envs=()
    shift 4
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    (cd "$dir" && exec env "${envs[@]}" timeout -k 5 "$lim" "$@" >"$o" 2>"$e" </dev/null) &
    pid=$!
    wait "$pid"
    rc=$?
    kill -9 -- "-$pid" 2>/dev/null
    return $rc
}

run_one() { # name expect args
    local name=$1 expect=$2 args=$3 dir=$WORK/$1 l=$LOGS/$1 rn rr t1 t2 v lim=$TR
    local -a argv=() nenv=(LD_LIBRARY_PATH="$DEPS:$CUDA_HOME/lib64:$WORK/_lib")
    local -a renv=(LD_LIBRARY_PATH="$B/client:$DEPS:$CUDA_HOME/lib64:$WORK/_lib" RGPU_SERVER="127.0.0.1:$PORT")
    read -r -a argv <<<"$args"
    # A sample refused by design may hang waiting for a forked peer: shorter limit.
    [ "${expect%%:*}" == refused ] && [ "$lim" -gt "$TREFUSED" ] && lim=$TREFUSED
    run_limited "$dir" "$TN" "$l.native" "$l.native.err" "${nenv[@]}" -- "./$name" "${argv[@]}"
    rn=$?
    t1=$(date +%s.%N)
    run_limited "$dir" "$lim" "$l.rgpu" "$l.rgpu.err" "${renv[@]}" -- "./$name" "${argv[@]}"
    rr=$?
    t2=$(date +%s.%N)
    v=$(verdict "$expect" "$rn" "$rr" "$l.native" "$l.rgpu" "$l.rgpu.err" "$lim")
    if [ "${v%%$'\t'*}" == FAIL ] && [ "$rr" -eq "$rn" ]; then
        # Same status, different output: a second native run tells volatile lines apart.
        run_limited "$dir" "$TN" "$l.native2" /dev/null "${nenv[@]}" -- "./$name" "${argv[@]}"
        v=$(verdict "$expect" "$rn" "$rr" "$l.native" "$l.rgpu" "$l.rgpu.err" "$lim" "$l.native2")
    fi
    emit "$name" "${v%%$'\t'*}" "${v#*$'\t'}; $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "rgpu %.1fs", b-a}')"
}

# ---------------------------------------------------------------------------- selftest
# The run mode end to end on a fake bundle: a gpu-server that only waits, and "samples" that are
# shell scripts behaving as samples do natively and through a client (they look for client/ in
# LD_LIBRARY_PATH). Each row must come out as expected.
selftest_run() { # tmpdir
    local d=$1 b=$1/bundle s=$1/stage want got n
    mkdir -p "$b/bin" "$b/client" "$b/deps" "$s"
    printf '#!/bin/sh\nexec sleep 600\n' >"$b/bin/gpu-server"
    fake() { # name body
        mkdir -p "$s/$1"
        printf '#!/bin/bash\nrgpu=0; case $LD_LIBRARY_PATH in *client*) rgpu=1 ;; esac\n%s\n' "$2" >"$s/$1/$1"
        chmod +x "$b/bin/gpu-server" "$s/$1/$1"
    }
    fake ok 'echo "Device 0"; echo "Time = $RANDOM ms"; echo "Result = PASS"'
    fake volatile 'echo "loops $RANDOM$RANDOM"; echo PASSED'
    fake args '[ -f data/in.txt ] && echo "args: $*"'
    mkdir -p "$s/args/data" && echo x >"$s/args/data/in.txt"
    fake differs '[ $rgpu = 1 ] && echo "Result = FAIL" || echo "Result = PASS"'
    fake refused '[ $rgpu = 1 ] && { echo "rgpu warn: cuIpcGetMemHandle is not supported; returning CUDA_ERROR_NOT_SUPPORTED" >&2; exit 1; }; echo PASSED'
    fake unsupported '[ $rgpu = 1 ] && { echo "rgpu warn: cuArrayCreate_v2 is not supported; returning CUDA_ERROR_NOT_SUPPORTED" >&2; exit 1; }; echo PASSED'
    fake hang '[ $rgpu = 1 ] && sleep 30; echo PASSED'
    fake crash '[ $rgpu = 1 ] && kill -SEGV $$; echo PASSED'
    fake waived 'echo "Waiving: needs two GPUs"; exit 2'
    fake forks '[ $rgpu = 1 ] && { (exec -a rgpu-selftest-orphan sleep 300) & echo "cuIpcOpenMemHandle is not supported" >&2; exit 1; }; echo PASSED'
    fake refusedhang '[ $rgpu = 1 ] && sleep 30; echo PASSED'
    fake numbering '[ $rgpu = 1 ] && echo "BLOCK 3 of block 1" || echo "BLOCK 2 of block 0"; echo PASSED'
    fake reshaped '[ $rgpu = 1 ] && echo "BLOCK 3" || echo "BLOCK 2 of block 0"; echo PASSED'
    printf '%s\n' "ok p pass" "volatile p pass" "args p pass -n=3 --x" "differs p pass" \
        "refused p refused:ipc" "unsupported p pass" "hang p pass" "crash p pass" "waived p pass" \
        "forks p refused:ipc" "refusedhang p refused:ipc" "numbering p pass" \
        "reshaped p varies" >"$s/samples_list.txt"
    # The list of the day names numbering "varies": that, not the bundle's list, counts.
    echo "numbering p varies" >"$d/list.txt"
    echo "missing p" >"$s/not_built.txt"
    tar -C "$s" -cJf "$b/samples.tar.xz" .
    LIST=$d/list.txt OUT=$d/out SAMPLES_WORK=$d/work SAMPLES_ROWS=$d/rows SAMPLES_TIMEOUT_RGPU=4 \
        SAMPLES_PORT=1 SAMPLES_TIMEOUT_REFUSED=2 run_samples "$b" >"$d/run.out" 2>&1
    for want in ok:PASS volatile:PASS args:PASS differs:FAIL refused:XFAIL unsupported:FAIL hang:FAIL \
        crash:FAIL waived:SKIP forks:XFAIL refusedhang:FAIL numbering:PASS reshaped:FAIL \
        missing:SKIP; do
        n=${want%%:*}
        got=$(awk -F'\t' -v n="$n" '$1 == n { print $2 "\t" $3 }' "$d/rows")
        if [ "${got%%$'\t'*}" == "${want#*:}" ]; then
            echo "ok   run $n: $got"
        else
            echo "FAIL run $n: wanted ${want#*:}, got: ${got:-no row}"
            fails=$((fails + 1))
        fi
    done
    grep -q 'args: -n=3 --x' "$d/out/rgpu-gpu-logs/samples/args.rgpu" ||
        { echo "FAIL run args: arguments or data/ not passed"; fails=$((fails + 1)); }
    grep -q '^total 14:' "$d/run.out" || { echo "FAIL run summary: $(tail -1 "$d/run.out")"; fails=$((fails + 1)); }
    grep -q 'timed out after 4s' "$d/rows" && grep -q 'refusedhang.*timed out after 2s' "$d/rows" ||
        { echo "FAIL run limits: rgpu 4 s, refused 2 s not applied"; fails=$((fails + 1)); }
    # The process the fake "forks" left behind was killed with its process group.
    if pgrep -f rgpu-selftest-orphan >/dev/null; then
        echo "FAIL run forks: a forked child outlived its sample"
        fails=$((fails + 1))
    fi
}

selftest() {
    local d fails=0
    d=$(mktemp -d)
    check() { # label expected-status verdict-args...
        local label=$1 want=$2 got
        shift 2
        got=$(verdict "$@")
        if [ "${got%%$'\t'*}" == "$want" ]; then
            echo "ok   $label: $got"
        else
            echo "FAIL $label: wanted $want, got: $got"
            fails=$((fails + 1))
        fi
    }
    printf 'Device 0: "NVIDIA H100"\nResult = PASS\nTime = 0.123 msec, Throughput = 12.3 GB/s\nptr 0x7f00aa\n' >"$d/n"
    printf 'Device 0: "NVIDIA H100"\nResult = PASS\nTime = 9.999 msec, Throughput = 99.9 GB/s\nptr 0x7f11bb\n' >"$d/r"
    : >"$d/err"
    check "timings and pointers ignored" PASS pass 0 0 "$d/n" "$d/r" "$d/err" 120
    printf 'Device 0: "NVIDIA H100"\nResult = FAIL\n' >"$d/r2"
    check "result line differs" FAIL pass 0 0 "$d/n" "$d/r2" "$d/err" 120
    check "exit status differs" FAIL pass 0 1 "$d/n" "$d/n" "$d/err" 120
    echo "2026-01-01T00:00:00.000Z rgpu warn: cuMemAllocManaged is not supported; returning CUDA_ERROR_NOT_SUPPORTED" >"$d/err2"
    check "refused as listed" XFAIL refused:managed-memory 0 1 "$d/n" "$d/r2" "$d/err2" 120
    check "refusal of a pass sample" FAIL pass 0 1 "$d/n" "$d/r2" "$d/err2" 120
    # A refusal the client logs below warning level (a probe, e.g. cuMemHostGetDevicePointer)
    # shows as the runtime's own error name in the sample's output.
    echo 'CUDA error at simpleZeroCopy.cu:197 code=801(cudaErrorNotSupported) "cudaHostGetDevicePointer"' >"$d/err3"
    check "refused, seen by the error name" XFAIL refused:mapped-host-memory 0 1 "$d/n" "$d/r2" "$d/err3" 120
    check "refused sample that crashes" FAIL refused:ipc 0 139 "$d/n" "$d/r2" "$d/err2" 120
    check "refused sample that times out" FAIL refused:ipc 0 124 "$d/n" "$d/r2" "$d/err2" 120
    check "refused sample that works" PASS refused:ipc 0 0 "$d/n" "$d/r" "$d/err" 120
    printf 'waived: needs two GPUs\n' >"$d/w"
    check "waived natively" SKIP pass 2 2 "$d/w" "$d/w" "$d/err" 120
    check "failing natively" SKIP pass 1 1 "$d/r2" "$d/r2" "$d/err" 120
    # Volatile line that is not a timing: differs between two native runs, so ignored.
    printf 'CPU executed 1234 loops waiting\nPASSED\n' >"$d/v1"
    printf 'CPU executed 5678 loops waiting\nPASSED\n' >"$d/v2"
    printf 'CPU executed 42 loops waiting\nPASSED\n' >"$d/vr"
    check "volatile line, one native run" FAIL pass 0 0 "$d/v1" "$d/vr" "$d/err" 120
    check "volatile line, two native runs" PASS pass 0 0 "$d/v1" "$d/vr" "$d/err" 120 "$d/v2"
    printf 'CPU executed 42 loops waiting\nFAILED\n' >"$d/vf"
    check "stable line differs, two runs" FAIL pass 0 0 "$d/v1" "$d/vf" "$d/err" 120 "$d/v2"
    # Different shapes (a line more in one native run): set comparison.
    printf 'CPU executed 1 loops waiting\nextra native line\nPASSED\n' >"$d/v3"
    check "shapes differ, stable lines kept" PASS pass 0 0 "$d/v1" "$d/vr" "$d/err" 120 "$d/v3"
    printf 'rgpu-only line\nPASSED\n' >"$d/vx"
    check "shapes differ, harmless extra line" PASS pass 0 0 "$d/v1" "$d/vx" "$d/err" 120 "$d/v3"
    printf 'CPU executed 7 loops waiting\nerror: mismatch at 3\nPASSED\n' >"$d/ve"
    check "shapes differ, extra error line" FAIL pass 0 0 "$d/v1" "$d/ve" "$d/err" 120 "$d/v3"
    printf 'CPU executed 9 loops waiting\n' >"$d/vm"
    check "shapes differ, stable line missing" FAIL pass 0 0 "$d/v1" "$d/vm" "$d/err" 120 "$d/v3"
    echo "reason: $(failure_reason 124 "$d/err2" 120)"
    echo "reason: $(failure_reason 139 "$d/err" 120)"
    echo "diff:   $(compare_outputs "$d/n" "$d/r2")"
    selftest_run "$d"
    rm -rf "$d"
    [ "$fails" -eq 0 ] && echo "selftest: all passed" || echo "selftest: $fails failed"
    [ "$fails" -eq 0 ]
}

case ${1:-} in
    build) [ $# -eq 3 ] || die "usage: samples.sh build CUDA_SAMPLES_DIR OUTDIR"; build_samples "$2" "$3" ;;
    run) [ $# -eq 2 ] || die "usage: samples.sh run BUNDLE_DIR"; run_samples "$2" ;;
    check) [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: samples.sh check OUTDIR [CLIENT_LIBCUDA]"; check_samples "$2" "${3:-}" ;;
    selftest) selftest ;;
    *) die "usage: samples.sh build CUDA_SAMPLES_DIR OUTDIR | check OUTDIR [CLIENT_LIBCUDA] | run BUNDLE_DIR | selftest" ;;
esac
