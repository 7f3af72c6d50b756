#!/bin/bash
# Bundle what the GPU host lacks into <repo>/.bundle (ignored by git; carried to the GPU host):
#   client/  rgpu's libcuda.so.1 and NVML shim libnvidia-ml.so.1 (only these go first in a
#            program's library path)
#   nccl/    rgpu's NCCL shim libnccl.so.2 (preloaded by the NCCL scripts)
#   bin/     gpu-server, rgpu, the test programs (static and shared cudart), ip
#   deps/    every shared library those need that is not part of glibc, plus libcudart.so.13
#   tools/   the stack sampler (bench/stack_sampler.c), for profiles natively and through rgpu
#   deb/     the rgpu-server and rgpu-client packages (tests/gpu/installed.sh)
#   samples.tar.xz  NVIDIA's cuda-samples, when SAMPLES_OUT holds them (tests/gpu/samples.sh build)
# Usage: tests/gpu/bundle.sh [BUILD_DIR [SAMPLES_OUT]]   (default <repo>/build, built beforehand;
#        SAMPLES_OUT defaults to $RGPU_SAMPLES_OUT, else <repo>/../samples-build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$ROOT/.bundle
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

rm -rf "$OUT"
mkdir -p "$OUT/client" "$OUT/bin" "$OUT/deps"
cp -L "$BUILD/lib/libcuda.so.1" "$OUT/client/"
cp -L "$BUILD/lib/libnvidia-ml.so.1" "$OUT/client/" # the NVML shim
mkdir -p "$OUT/nccl" # the NCCL shim, apart: only the NCCL scripts preload it (tests/gpu/nccl_lib.sh)
cp -L "$BUILD/lib/libnccl.so.2" "$OUT/nccl/"
cp "$BUILD/tests/nccl/nccl_ranks" "$BUILD/tests/nccl/nccl_busbw" "$BUILD/bin/rgpu-bench-nccl" \
    "$OUT/bin/" # tests/gpu/nccl_one_rank.sh, nccl_two_gpu.sh, bench/nccl_calls.sh
cp "$BUILD/bin/gpu-server" "$BUILD/bin/rgpu" "$BUILD/bin/rgpu-demo-app" "$OUT/bin/"
cp "$BUILD"/tests/programs/*_static "$BUILD"/tests/programs/*_shared "$OUT/bin/"
cp "$BUILD/bin/rgpu-bench-micro" "$BUILD/bin/rgpu-bench-tcp" "$BUILD/bin/rgpu-bench-peer" "$OUT/bin/"
cp "$BUILD/bin/rgpu-dmabuf-probe" "$OUT/bin/" # GPUDirect RDMA capability, run natively
mkdir -p "$OUT/tools" # preloaded by bench/frameworks.sh FW_SAMPLE=1 (bench/stack_sampler.c)
cp "$BUILD/lib/librgpu-stack-sampler.so" "$OUT/tools/"
"$CUDA_HOME/bin/nvcc" -O2 -gencode arch=compute_90,code=sm_90 -o "$OUT/bin/rgpu-bench-gemm" \
    "$ROOT/bench/gemm.cu" -lcublas -Xlinker -rpath="$CUDA_HOME/lib64"
cp "$BUILD"/tests/integration/hold_memory "$BUILD"/tests/integration/server_death "$OUT/bin/"
cp "$BUILD"/tests/integration/vmm_pools "$BUILD"/tests/integration/copies_2d \
    "$BUILD"/tests/integration/arrays "$BUILD"/tests/integration/lanes_async "$OUT/bin/"
cp "$BUILD"/tests/multigpu/vmm_two "$BUILD"/tests/multigpu/p2p_answers "$OUT/bin/" # multigpu.sh
cp "$(command -v ip)" "$OUT/bin/ip"
"$CUDA_HOME/bin/nvcc" -O2 -gencode arch=compute_90,code=sm_90 -o "$OUT/bin/tenant_load" \
    "$ROOT/tests/gpu/tenant_load.cu" # saturating, latency and long loads for tenant_*.sh
"$CUDA_HOME/bin/nvcc" -cubin -arch=sm_90 -o "$OUT/bin/params.cubin" \
    "$ROOT/tests/client_unit/data/params.cu" # tests/gpu/param_layouts.py
"$CUDA_HOME/bin/nvcc" -O2 -gencode arch=compute_90,code=sm_90 -o "$OUT/bin/cublas_sgemm" \
    "$ROOT/tests/gpu/cublas_sgemm.cu" -lcublas -Xlinker -rpath="$CUDA_HOME/lib64"
cp -L "$CUDA_HOME"/lib64/libcudart.so.13 "$OUT/deps/"
# The Debian packages, for tests/gpu/installed.sh (their libraries' dependencies are in deps/).
mkdir -p "$OUT/deb"
rm -f "$BUILD"/rgpu-*.deb
(cd "$BUILD" && cpack -G DEB >/dev/null)
cp "$BUILD"/rgpu-server_*.deb "$BUILD"/rgpu-client_*.deb "$OUT/deb/"
# installed.sh checks the real driver's system calls against the unit's filter (no
# systemd-analyze there): the allowed list, and strace (its libraries join deps/ below).
python3 "$ROOT/tools/unit_syscalls.py" --dump "$ROOT/deploy/systemd/gpu-server.service" \
    "$OUT/deb/allowed-syscalls.txt"
cp "$(command -v strace)" "$OUT/bin/strace"
SAMPLES_OUT=${2:-${RGPU_SAMPLES_OUT:-$ROOT/../samples-build}}
if [ -f "$SAMPLES_OUT/samples.tar.xz" ]; then
    cp "$SAMPLES_OUT/samples.tar.xz" "$OUT/"
else
    echo "no cuda-samples in $SAMPLES_OUT (tests/gpu/samples.sh build makes them); bundling none"
fi

# Shared libraries outside glibc that the bundled binaries need.
for f in "$OUT"/bin/* "$OUT"/client/* "$OUT"/nccl/*; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3}' || true # not every file is a program (params.cubin)
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libcuda.so.*) ;;
        libnccl.so.*) ;; # the shim is in nccl/, the host's NCCL is PyTorch's
        libgcc_s.so.*|libstdc++.so.*|libcudart.so.*|libcublas*) ;; # the GPU host has its own
        libcrypto.so.*|libssl.so.*) ;; # so has it (Ubuntu's OpenSSL 3, which its Python uses)
        *) cp -L "$lib" "$OUT/deps/" ;;
    esac
done
du -sh "$OUT"
ls "$OUT"/*
