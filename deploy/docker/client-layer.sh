#!/bin/sh
# The rgpu client as a layer for any image with glibc (2.34 or later), in two steps; used by
# Dockerfile.client and by tools/pkg_test.sh (which runs the result in a glibc-only chroot).
#
#   client-layer.sh DEB OUT
#       On the build stage (Debian 12, with the package's dependencies installed): unpack the
#       rgpu-client package DEB into OUT and copy the libraries its programs need beyond glibc
#       (libprotobuf-c, libcrypto) into OUT/usr/lib/rgpu/deps/. Only the client's RUNPATHs name
#       deps/ ($ORIGIN/deps, $ORIGIN/../lib/rgpu/deps); `rgpu run` puts /usr/lib/rgpu on an
#       application's LD_LIBRARY_PATH, where only libcuda.so.1, libnvidia-ml.so.1 and
#       libnccl.so.2 lie, so the application never gets rgpu's copies in place of its own.
#   client-layer.sh --prune DIR
#       On the final image: remove from DIR (/usr/lib/rgpu/deps) every library the image has
#       itself (ldconfig -p), so that rgpu and the application load one copy (the image's, which
#       may be newer). Without ldconfig nothing is removed.
set -eu

GLIBC='libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1
       libanl.so.1 ld-linux-x86-64.so.2 ld-linux-aarch64.so.1 linux-vdso.so.1'
is_glibc() { for g in $GLIBC; do [ "$1" = "$g" ] && return 0; done; return 1; }

if [ "${1:-}" = "--prune" ]; then
    dir=$2
    command -v ldconfig >/dev/null 2>&1 || exit 0
    for lib in "$dir"/*; do
        [ -e "$lib" ] || continue
        name=$(basename "$lib")
        if ldconfig -p | grep -q "^[[:space:]]*$name "; then
            rm -f "$lib"
            echo "client-layer: $name: the image's own"
        else
            echo "client-layer: $name: rgpu's copy in $dir"
        fi
    done
    rmdir "$dir" 2>/dev/null || true
    exit 0
fi

[ $# -eq 2 ] || { echo "usage: client-layer.sh DEB OUT | --prune DIR" >&2; exit 2; }
deb=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
dpkg-deb -x "$deb" "$out"
deps=$out/usr/lib/rgpu/deps
mkdir -p "$deps"
for bin in "$out"/usr/bin/rgpu "$out"/usr/lib/rgpu/*.so.*; do
    [ -f "$bin" ] || continue
    # ldd lists the whole tree: a library that a copied library needs in turn would not be
    # found through deps/ (RUNPATH serves direct dependencies only), so there must be none
    ldd "$bin" | while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        is_glibc "$name" && continue
        case "$path" in
            "$out"/*) continue ;; # one of the client's own libraries
            /*) ;;
            *) echo "client-layer: $bin needs $name, not found on this system" >&2; exit 1 ;;
        esac
        if ! ldd "$path" | awk '$2 == "=>" {print $1}' | while read -r sub; do
            is_glibc "$sub" || { echo "client-layer: $name needs $sub: not supported" >&2; exit 1; }
        done; then
            exit 1
        fi
        cp -L "$path" "$deps/$name"
    done
done
echo "client-layer: $(ls "$deps" | tr '\n' ' ')in usr/lib/rgpu/deps"
