#!/bin/bash
# Every kernel the test programs define must be in the fake driver's table under its exact
# (mangled) name, or the programs fail with CUDA_ERROR_NOT_FOUND on CI only.
# Usage: check_kernel_names.sh NVCC PROGRAMS_DIR KERNELS_C
set -eu
NVCC=$1 DIR=$2 TABLE=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PTXAS=$(dirname "$NVCC")/ptxas
missing=0

check() { # name where
    if grep -q "{\"$1\"," "$TABLE"; then
        echo "ok   $1 ($2)"
    else
        echo "MISSING $1 ($2): add it to $TABLE"
        missing=$((missing + 1))
    fi
}

for src in "$DIR"/*.cu; do
    name=$(basename "$src" .cu)
    "$NVCC" -cubin -arch=sm_90 -o "$WORK/$name.cubin" "$src"
    for k in $(nm "$WORK/$name.cubin" | awk '$2 == "T" {print $3}'); do
        check "$k" "$name.cu"
    done
done
# Kernels written in PTX inside a program or a shared header (static const char ptx[]): each
# .entry name, and ptxas must accept it.
for src in "$DIR"/*.cu "$DIR"/*.h; do
    name=$(basename "$src")
    grep -q 'static const char ptx\[\] =' "$src" || continue
    sed -n '/static const char ptx\[\] =/,/^ *;/p' "$src" | sed -n 's/^ *"\(.*\)\\n"$/\1/p' \
        >"$WORK/$name.ptx"
    "$PTXAS" -arch=sm_90 -o "$WORK/$name.ptx.cubin" "$WORK/$name.ptx"
    for k in $(nm "$WORK/$name.ptx.cubin" | awk '$2 == "T" {print $3}'); do
        check "$k" "$name, PTX"
    done
done
[ "$missing" = 0 ]
