#!/bin/bash
# The Debian packages end to end, on this machine (root; CI's fresh Debian 12):
#   build rgpu-server and rgpu-client with cpack, lint them, install them, check what the
#   maintainer scripts made (user, groups, cache, conffiles), check the unit with
#   systemd-analyze (verify, and security: its exposure score), start the installed gpu-server
#   as the unit's ExecStart line does, as user rgpu, with the installed config (plus the fake
#   driver and a free local port), run a CUDA program through the installed client
#   (/usr/bin/rgpu run, libraries from /usr/lib/rgpu), the client as Dockerfile.client lays it
#   out (deploy/docker/client-layer.sh) moved elsewhere and in a glibc-only root (rgpu --help,
#   --version, a program), then purge both and check nothing is left.
# Usage: tools/pkg_test.sh BUILD_DIR      (BUILD_DIR already built; needs root)
set -u
BUILD=$(cd "$1" && pwd)
UNIT=/lib/systemd/system/gpu-server.service
WORK=$(mktemp -d /tmp/rgpu-pkg.XXXXXX)
SERVER_PID=
INSTALLED=0
FAILS=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
purge() { dpkg --purge rgpu-client rgpu-server >"$WORK/purge.log" 2>&1; }
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill $(cat /proc/"$SERVER_PID"/task/*/children 2>/dev/null) "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    [ "$INSTALLED" = 1 ] && purge
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
    echo "pkg_test: needs root (installs and purges the packages); skipped"
    exit 0
fi
if dpkg-query -W -f='${Status}' rgpu-server rgpu-client 2>/dev/null | grep -q "ok installed"; then
    echo "pkg_test: rgpu packages are installed on this machine already; not touching them" >&2
    exit 1
fi
for user in rgpu; do
    getent passwd "$user" >/dev/null && { echo "pkg_test: user $user exists already" >&2; exit 1; }
done

# 1. Build and lint.
rm -f "$BUILD"/rgpu-*.deb
(cd "$BUILD" && cpack -G DEB >"$WORK/cpack.log" 2>&1) || { cat "$WORK/cpack.log"; exit 1; }
SERVER_DEB=$(ls "$BUILD"/rgpu-server_*.deb) CLIENT_DEB=$(ls "$BUILD"/rgpu-client_*.deb)
ok "built $(basename "$SERVER_DEB") $(basename "$CLIENT_DEB")"
# Tags left on purpose: initial-upload-closes-no-bugs (no Debian bug to close), and
# maintainer-script-empty (rgpu-client's no-op scripts keep CPack from writing ldconfig calls
# for libraries that are deliberately not on the loader's path). Info tags are printed only.
if command -v lintian >/dev/null; then
    if lintian --fail-on error,warning --suppress-tags \
        initial-upload-closes-no-bugs,maintainer-script-empty -I \
        "$SERVER_DEB" "$CLIENT_DEB" >"$WORK/lintian.log" 2>&1; then
        ok "lintian: no errors or warnings ($(grep -c '^I:' "$WORK/lintian.log") info tags)"
    else
        fail "lintian"; cat "$WORK/lintian.log"
    fi
    grep '^[EWI]:' "$WORK/lintian.log" | sed 's/^/     /'
else
    fail "lintian is not installed"
fi

# The Dockerfiles build from the packages in BUILD_DIR as their context (docker is not here):
# every file a COPY takes from the context must be there.
for df in "$(dirname "$0")"/../deploy/docker/Dockerfile.*; do
    missing=""
    for src in $(awk '$1 == "COPY" && $2 !~ /^--/ {for (i = 2; i < NF; i++) print $i}' "$df"); do
        # shellcheck disable=SC2086 # the source is a glob
        ls "$BUILD"/$src >/dev/null 2>&1 || missing="$missing $src"
    done
    [ -z "$missing" ] && ok "$(basename "$df"): its context files are in the build dir" ||
        fail "$(basename "$df"): not in $BUILD:$missing"
done

# 2. Install (dependencies are installed by tools/test.sh's package list).
INSTALLED=1
if dpkg -i "$SERVER_DEB" "$CLIENT_DEB" >"$WORK/install.log" 2>&1; then
    ok "dpkg -i"
else
    fail "dpkg -i"; cat "$WORK/install.log"; exit 1
fi
getent passwd rgpu | grep -q ':/var/cache/rgpu:/usr/sbin/nologin$' && ok "system user rgpu" ||
    fail "user rgpu: $(getent passwd rgpu)"
if getent group video >/dev/null; then
    id -nG rgpu | grep -qw video && ok "rgpu is in group video" || fail "rgpu not in video: $(id -nG rgpu)"
fi
[ "$(stat -c '%U:%G %a' /var/cache/rgpu)" = "rgpu:rgpu 700" ] && ok "/var/cache/rgpu rgpu:rgpu 0700" ||
    fail "/var/cache/rgpu: $(stat -c '%U:%G %a' /var/cache/rgpu)"
CONFFILES=$(dpkg-query -W -f='${Conffiles}\n' rgpu-server rgpu-client | awk 'NF {print $1}' | sort | tr '\n' ' ')
[ "$CONFFILES" = "/etc/rgpu/client.conf /etc/rgpu/server.conf " ] && ok "conffiles: $CONFFILES" ||
    fail "conffiles: $CONFFILES"
! ldconfig -p | grep -q /usr/lib/rgpu &&
    ok "/usr/lib/rgpu is not on the loader's path" || fail "/usr/lib/rgpu is in the ld.so cache"

# 3. The unit.
if systemd-analyze verify "$UNIT" >"$WORK/verify.log" 2>&1; then
    ok "systemd-analyze verify"
else
    fail "systemd-analyze verify"; cat "$WORK/verify.log"
fi
if systemd-analyze security --offline=true "$UNIT" >"$WORK/security.log" 2>&1; then
    ok "systemd-analyze security: $(grep -o 'Overall exposure level.*' "$WORK/security.log")"
    grep -E '^✗' "$WORK/security.log" | sed 's/^/     /'
else
    fail "systemd-analyze security"; cat "$WORK/security.log"
fi

# 4. The installed server as the unit starts it: ExecStart, User, Environment from the unit.
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT")
USER_=$(sed -n 's/^User=//p' "$UNIT")
ENVS=$(sed -n 's/^Environment=//p' "$UNIT")
install -d -m 0755 "$WORK/driver"
install -m 0644 "$BUILD/tests/fakecuda/libfakecuda.so" "$WORK/driver/"
chmod 0711 "$WORK"
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
# As installed, with no tenant: no start (the packaged config's require_tenants = yes).
# shellcheck disable=SC2086
timeout 30 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $ENVS \
    setpriv --reuid="$USER_" --regid="$USER_" --init-groups --no-new-privs -- \
    $EXEC --driver "$WORK/driver/libfakecuda.so" --listen 127.0.0.1 --port "$PORT" \
    >"$WORK/no-tenant.log" 2>&1
RC=$?
[ "$RC" != 0 ] && [ "$RC" != 124 ] && grep -q "require_tenants = yes and no \[tenant NAME\]" "$WORK/no-tenant.log" &&
    ok "the installed config does not start without a tenant (exit $RC)" ||
    fail "the installed config without a tenant: exit $RC: $(cat "$WORK/no-tenant.log")"
# A tenant, as an operator adds one; every client below names it.
printf '\n[tenant pkg-test]\ntoken_sha256 = %s\n' "$(/usr/sbin/gpu-server --hash-token pkg-secret)" \
    >>/etc/rgpu/server.conf
/usr/sbin/gpu-server --check-config /etc/rgpu/server.conf >"$WORK/check.log" 2>&1 &&
    /usr/sbin/gpu-server --check-config --client /etc/rgpu/client.conf >>"$WORK/check.log" 2>&1 &&
    ok "gpu-server --check-config: the installed configs (with a tenant) are valid" ||
    fail "gpu-server --check-config: $(cat "$WORK/check.log")"
export RGPU_TENANT=pkg-test RGPU_TOKEN=pkg-secret
# shellcheck disable=SC2086 # ExecStart and Environment are word lists
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $ENVS \
    setpriv --reuid="$USER_" --regid="$USER_" --init-groups --no-new-privs -- \
    $EXEC --driver "$WORK/driver/libfakecuda.so" --listen 127.0.0.1 --port "$PORT" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
# ready when it says so (it logs after listen(): a connect alone can win the race with the line)
for _ in $(seq 100); do
    grep -q "listening on 127.0.0.1:$PORT" "$WORK/server.log" 2>/dev/null && break
    sleep 0.1
done
grep -q "listening on 127.0.0.1:$PORT" "$WORK/server.log" && ok "installed gpu-server listens (as $USER_)" ||
    fail "installed gpu-server did not start: $(cat "$WORK/server.log")"
[ "$(stat -c %U /proc/$SERVER_PID)" = "$USER_" ] || fail "gpu-server runs as $(stat -c %U /proc/$SERVER_PID)"

# 5. A CUDA program through the installed client (static cudart: it dlopens libcuda.so.1).
PROG=$BUILD/tests/programs/vadd_static
if RGPU_CONFIG=/etc/rgpu/client.conf LD_DEBUG=libs LD_DEBUG_OUTPUT="$WORK/ld" \
    rgpu run --server "127.0.0.1:$PORT" -- "$PROG" >"$WORK/prog.out" 2>"$WORK/prog.err" &&
    grep -q PASS "$WORK/prog.out"; then
    ok "vadd_static PASS through rgpu run"
else
    fail "vadd_static: $(cat "$WORK/prog.out" "$WORK/prog.err")"
fi
grep -qh "calling init: /usr/bin/../lib/rgpu/libcuda.so.1" "$WORK"/ld.* &&
    ok "the program loaded /usr/lib/rgpu/libcuda.so.1" ||
    fail "the program did not load the installed client: $(grep -h 'libcuda' "$WORK"/ld.* | head -3)"
grep -q "session 1 .*ended" "$WORK/server.log" || sleep 1
grep -qE "session 1 .*(ended|exit)" "$WORK/server.log" && ok "the server logged the session" ||
    fail "no session in the server log"
# The client as deploy/docker/Dockerfile.client lays it out (client-layer.sh: the package's
# files, its private libraries in /usr/lib/rgpu/deps), moved elsewhere (the Kubernetes example
# copies it to /opt/rgpu): rgpu run finds everything from where it lies.
sh "$BUILD/client-layer.sh" "$CLIENT_DEB" "$WORK/layer" >"$WORK/layer.log" 2>&1 ||
    fail "client-layer.sh: $(cat "$WORK/layer.log")"
if "$WORK/layer/usr/bin/rgpu" run --server "127.0.0.1:$PORT" -- "$PROG" >"$WORK/layer.out" 2>&1 &&
    grep -q PASS "$WORK/layer.out"; then
    ok "the client layer (Dockerfile.client's files, moved) runs vadd_static"
else
    fail "the client layer: $(cat "$WORK/layer.out")"
fi
# Issue 27 item 10: rgpu run puts only the driver-shaped libraries on the application's path;
# Python's ssl keeps the system's libcrypto although the layer carries its own copy.
ONPATH=$(ls "$WORK/layer/usr/lib/rgpu" | tr '\n' ' ')
[ "$ONPATH" = "deps libcuda.so.1 libnccl.so.2 libnvidia-ml.so.1 " ] &&
    ok "the directory rgpu run puts first holds libcuda, libnccl, libnvidia-ml (and deps/)" ||
    fail "the directory rgpu run puts first holds: $ONPATH"
LD_DEBUG=libs "$WORK/layer/usr/bin/rgpu" run -- python3 -c 'import ssl' 2>"$WORK/ssl.log"
CRYPTO=$(sed -n 's/.*calling init: \(.*libcrypto\.so\.3\)$/\1/p' "$WORK/ssl.log" | head -1)
case "$CRYPTO" in
    "$WORK"/*|"") fail "Python's ssl under rgpu run loaded libcrypto from '${CRYPTO}'" ;;
    *) ok "Python's ssl under rgpu run loads the system's libcrypto ($CRYPTO), not rgpu's copy" ;;
esac
cp -r "$WORK/layer/usr/lib/rgpu/deps" "$WORK/deps-prune"
sh "$BUILD/client-layer.sh" --prune "$WORK/deps-prune" >/dev/null
[ ! -e "$WORK/deps-prune" ] && ok "client-layer.sh --prune drops the copies a base has itself" ||
    fail "client-layer.sh --prune left: $(ls "$WORK/deps-prune")"

# Issue 27 item 10: a glibc-only root (glibc's libraries, nothing else), the layer as
# Dockerfile.client makes it, and the application with its own C++ runtime: rgpu --help,
# --version and a CUDA program through rgpu run, against the server outside the root.
ROOT=$WORK/glibc-root
LIBDIR=$(dirname "$(readlink -f /lib64/ld-linux-x86-64.so.2)")
mkdir -p "$ROOT/lib64" "$ROOT$LIBDIR" "$ROOT/proc" "$ROOT/dev" "$ROOT/etc" "$ROOT/app"
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do
    cp -L "$LIBDIR/$lib" "$ROOT$LIBDIR/"
done
ln -s "$LIBDIR/ld-linux-x86-64.so.2" "$ROOT/lib64/ld-linux-x86-64.so.2"
sh "$BUILD/client-layer.sh" "$CLIENT_DEB" "$ROOT" >/dev/null 2>&1
cp "$PROG" "$ROOT/app/"
for lib in $(ldd "$PROG" | awk '$2 == "=>" {print $3}'); do # the application's own
    [ -e "$ROOT$lib" ] || { mkdir -p "$ROOT$(dirname "$lib")"; cp -L "$lib" "$ROOT$lib"; }
done
in_root() { # [VAR=VALUE...] command...: in the root, in a mount namespace of its own (/proc and
    # /dev mounted there), with RGPU_CONFIG and those variables alone in its environment
    local vars=()
    while [ $# -gt 0 ] && [[ "$1" == *=* ]]; do vars+=("$1"); shift; done
    unshare --mount --fork sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" &&
        exec "$@"' "$ROOT" env -i RGPU_CONFIG=/etc/rgpu/client.conf "${vars[@]}" \
        /usr/sbin/chroot "$ROOT" "$@"
}
NONGLIBC=$(cd "$ROOT" && find . -name '*.so*' | grep -v -e '/usr/lib/rgpu/' \
    -e 'libc\.so' -e 'libm\.so' -e 'libdl\.so' -e 'libpthread\.so' -e 'librt\.so' -e 'ld-linux' \
    -e 'libstdc++' -e 'libgcc_s' | tr '\n' ' ')
[ -z "$NONGLIBC" ] && ok "the root has glibc, the client layer and the program's C++ runtime only" ||
    fail "the root has more: $NONGLIBC"
in_root /usr/bin/rgpu --help >"$WORK/root-help.out" 2>&1 && grep -q "^usage: rgpu COMMAND" "$WORK/root-help.out" &&
    ok "glibc-only root: rgpu --help" || fail "glibc-only root: rgpu --help: $(cat "$WORK/root-help.out")"
in_root /usr/bin/rgpu --version >"$WORK/root-version.out" 2>&1 && grep -q "^rgpu 0" "$WORK/root-version.out" &&
    ok "glibc-only root: $(cat "$WORK/root-version.out")" ||
    fail "glibc-only root: rgpu --version: $(cat "$WORK/root-version.out")"
if in_root LD_DEBUG=libs RGPU_TENANT="$RGPU_TENANT" RGPU_TOKEN="$RGPU_TOKEN" /usr/bin/rgpu run --server "127.0.0.1:$PORT" -- /app/vadd_static \
    >"$WORK/root-prog.out" 2>&1 && grep -q PASS "$WORK/root-prog.out"; then
    ok "glibc-only root: vadd_static PASS through rgpu run"
else
    fail "glibc-only root: vadd_static: $(grep -v '^ *[0-9]*:' "$WORK/root-prog.out" | tail -5)"
fi
grep -q "calling init: /usr/bin/../lib/rgpu/deps/libprotobuf-c.so.1" "$WORK/root-prog.out" &&
    ok "... rgpu found libprotobuf-c in /usr/lib/rgpu/deps through its RUNPATH" ||
    fail "... libprotobuf-c: $(grep 'init: .*protobuf' "$WORK/root-prog.out" | head -2)"
ls /var/cache/rgpu/modules >/dev/null 2>&1 && ok "module cache in /var/cache/rgpu/modules" ||
    fail "no module cache directory under /var/cache/rgpu"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
RC=$?
SERVER_PID=
[ "$RC" = 0 ] && ok "gpu-server stopped on SIGTERM (exit 0)" || fail "gpu-server exit $RC on SIGTERM"

# 4b. The same under strace: every system call and socket family the server and its workers
# use while serving the program must be inside the unit's SystemCallFilter= and
# RestrictAddressFamilies= (the fake driver stands in for the real one, whose own calls are
# checked on a GPU host with systemd: tests/gpu/installed.sh).
if command -v strace >/dev/null; then
    install -d -m 0777 "$WORK/trace"
    PORT2=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    # shellcheck disable=SC2086
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $ENVS \
        setpriv --reuid="$USER_" --regid="$USER_" --init-groups --no-new-privs -- \
        strace -f -qq -o "$WORK/trace/log" \
        $EXEC --driver "$WORK/driver/libfakecuda.so" --listen 127.0.0.1 --port "$PORT2" \
        >"$WORK/server2.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$PORT2") 2>/dev/null && break
        sleep 0.1
    done
    # strace slows the server down: give the client time on a loaded machine.
    RGPU_CONNECT_TIMEOUT_MS=60000 rgpu run --server "127.0.0.1:$PORT2" -- "$PROG" \
        >"$WORK/prog2.out" 2>&1 ||
        fail "vadd_static under strace: $(cat "$WORK/prog2.out" "$WORK/server2.log")"
    sleep 0.5
    # SIGTERM to gpu-server itself (strace's child); strace ends with it.
    kill -TERM "$(cat /proc/"$SERVER_PID"/task/*/children | awk '{print $1}')"
    wait "$SERVER_PID"; SERVER_PID=
    if MSG=$(python3 "$(dirname "$0")/unit_syscalls.py" "$UNIT" "$WORK/trace/log"); then
        ok "sandbox: $MSG"
    else
        fail "sandbox: $MSG"
    fi
else
    fail "strace is not installed (the sandbox check needs it)"
fi

# 6. Purge: nothing left.
FILES=$( (dpkg-deb -c "$SERVER_DEB"; dpkg-deb -c "$CLIENT_DEB") | awk '$1 !~ /^d/ {print substr($6, 2)}')
INSTALLED=0
purge || { fail "dpkg --purge"; cat "$WORK/purge.log"; }
LEFT=""
for f in $FILES /etc/rgpu /usr/lib/rgpu /var/cache/rgpu /usr/share/doc/rgpu-server \
    /usr/share/doc/rgpu-client; do
    [ -e "$f" ] && LEFT="$LEFT $f"
done
getent passwd rgpu >/dev/null && LEFT="$LEFT user:rgpu"
getent group rgpu >/dev/null && LEFT="$LEFT group:rgpu"
getent group video | grep -qw rgpu && LEFT="$LEFT video-member:rgpu"
dpkg-query -W rgpu-server rgpu-client >/dev/null 2>&1 && LEFT="$LEFT dpkg-status"
[ -z "$LEFT" ] && ok "purge left nothing ($(echo "$FILES" | wc -w) files, user, group, cache)" ||
    fail "left after purge:$LEFT"

if [ "$FAILS" -ne 0 ]; then
    echo "--- server log"; cat "$WORK/server.log" 2>/dev/null
    echo "packages: $FAILS check(s) failed"
    exit 1
fi
echo "packages: all checks passed"
