#!/bin/sh
# Install what is missing (Debian packages), build everything, run every test.
# Usage: tools/test.sh            (from anywhere; builds in <repo>/build and <repo>/build-asan)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
JOBS=$(nproc 2>/dev/null || echo 2)
PKGS="build-essential cmake pkg-config python3 binutils protobuf-c-compiler libprotobuf-c-dev
      libevent-dev libssl-dev libcmocka-dev libibverbs-dev librdmacm-dev iproute2
      adduser lintian systemd strace nodejs clang clang-format prometheus
      munge slurmctld slurmd slurm-client libslurm-dev python3-grpcio python3-grpc-tools"
# prometheus: for promtool alone (check metrics on a live /metrics: tests/worker/ops_e2e.sh,
# tools/k8s_validate.sh). Debian has no smaller package with promtool: 19 MB to download, 96 MB
# installed, about 40 s; its service is not started (no systemd running in CI).
# python3-grpcio, python3-grpc-tools: the DRA node plugin and its stubs
# (deploy/kubernetes/pool/validate.sh).

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "== installing:$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
# npm comes with some builds of nodejs and in a package of its own with Debian's.
if ! command -v npm >/dev/null; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends npm
fi
if [ ! -f "$CUDA_HOME/include/cuda.h" ] || [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "error: the CUDA 13 toolkit (cuda.h, nvcc) is not at $CUDA_HOME; install it or set CUDA_HOME" >&2
    exit 1
fi

echo "== build (RelWithDebInfo) and all tests"
cmake -S "$ROOT" -B "$ROOT/build" -DCUDA_HOME="$CUDA_HOME" >/dev/null
cmake --build "$ROOT/build" -j "$JOBS"
(cd "$ROOT/build" && ctest --output-on-failure -j "$JOBS")

# The packages as an operator gets them (root only: it installs and purges them).
echo "== Debian packages: build, lint, install, unit checks, serve, purge"
"$ROOT/tools/pkg_test.sh" "$ROOT/build"
echo "== rgpu-slurm package: lint, install, the plugin loads from plugstack.conf.d, purge"
"$ROOT/tests/slurm/pkg_slurm.sh" "$ROOT/build"
echo "== Kubernetes manifests: schemas, references, the DaemonSet's pod run as shipped and probed"
"$ROOT/tools/k8s_validate.sh" "$ROOT/build"
echo "== Kubernetes pool manifests (DRA): schemas, references, the publisher's ResourceSlice"
"$ROOT/deploy/kubernetes/pool/validate.sh" "$ROOT/build"

# The C parts again under AddressSanitizer and UBSan. The integration tests load the client into
# nvcc-built programs that are not instrumented, so they run in the plain build only.
echo "== build with ASan+UBSan and the unit, transport and server tests"
cmake -S "$ROOT" -B "$ROOT/build-asan" -DCUDA_HOME="$CUDA_HOME" -DRGPU_SANITIZE=ON >/dev/null
cmake --build "$ROOT/build-asan" -j "$JOBS"
(cd "$ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$JOBS" -LE integration)
# libFuzzer over the frame decoder, the Call decoder and the worker on the fake driver: a short
# run in CI (20 s a target); tests/fuzz/README.md has the longer run for a release.
echo "== fuzz (clang, libFuzzer): 20 s per target"
cmake -S "$ROOT" -B "$ROOT/build-fuzz" -DCUDA_HOME="$CUDA_HOME" -DCMAKE_C_COMPILER=clang \
    -DRGPU_FUZZ=ON >/dev/null
cmake --build "$ROOT/build-fuzz" -j "$JOBS" --target fuzz_frame fuzz_call fuzz_worker
"$ROOT/tests/fuzz/run.sh" "$ROOT/build-fuzz" 20
echo "== all tests passed"
