#!/bin/bash
# On the GPU host, the packages as an operator installs them: rgpu-server and rgpu-client from
# the bundle (tests/gpu/bundle.sh puts them in deb/) installed with dpkg; the installed
# gpu-server started exactly as the unit's ExecStart line says, as the unit's User= (rgpu),
# with the unit's Environment= and the installed /etc/rgpu/server.conf, on the host's real
# driver; a PyTorch program (tests/gpu/torch_smoke.py) through the installed client
# (/usr/bin/rgpu run), its output compared with the native run; then SIGTERM, dpkg --purge, and
# a check that nothing is left. Where systemd is the host's init, also the unit itself: start,
# the same program, reload, journal priorities, stop.
# The GPU host (Ubuntu 24.04) has no package registry: dependencies that are not installed
# there (libprotobuf-c1, maybe libevent) are not installable, so dpkg is told --force-depends
# for exactly those and the bundle's deps/ folder is put in LD_LIBRARY_PATH (said in the log).
# Without root (no dpkg, no setpriv), the packaged binary and config are unpacked with
# dpkg-deb -x and run the same way as the current user instead (said in the log).
# Usage: tests/gpu/installed.sh [BUNDLE_DIR]      (as root for the full check)
# Dry run without a GPU (the script's own check, not the GPU result): DRY_DRIVER=<a fake
# libcuda, e.g. build/tests/fakecuda/libfakecuda.so> adds --driver to ExecStart and runs the
# bundle's vadd_static instead of PyTorch, checking its PASS instead of a native comparison.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$ROOT/.bundle}" && pwd)
LOGS=${OUT:-/tmp}/rgpu-gpu-logs
mkdir -p "$LOGS"
SERVER_DEB=$(ls "$B"/deb/rgpu-server_*.deb) CLIENT_DEB=$(ls "$B"/deb/rgpu-client_*.deb)
FAILS=0 SERVER_PID= INSTALLED=0 PREFIX=
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
    [ "$INSTALLED" = 1 ] && dpkg --purge rgpu-client rgpu-server >/dev/null 2>&1
}
trap cleanup EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat /etc/os-release | grep PRETTY_NAME

if [ "$(id -u)" -eq 0 ] && command -v dpkg >/dev/null; then
    # Depends the host does not satisfy: forced, and served from the bundle's deps/.
    missing=""
    for dep in $( (dpkg-deb -f "$SERVER_DEB" Depends; dpkg-deb -f "$CLIENT_DEB" Depends) |
                 tr ',' '\n' | sed 's/(.*//; s/|.*//; s/ //g' | sort -u); do
        dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q "ok installed" && continue
        apt-cache showpkg "$dep" 2>/dev/null | sed -n '/^Reverse Provides:/,$p' | tail -n +2 |
            awk '{print $1}' | while read -r p; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && echo y
            done | grep -q y && continue
        missing="$missing $dep"
    done
    force=""
    [ -n "$missing" ] && force=--force-depends && echo "note: not installed here:$missing (dpkg $force)"
    if dpkg -i $force "$SERVER_DEB" "$CLIENT_DEB" >"$LOGS/installed.dpkg.log" 2>&1; then
        ok "dpkg -i $force rgpu-server rgpu-client"
    else
        fail "dpkg -i"; cat "$LOGS/installed.dpkg.log"; exit 1
    fi
    INSTALLED=1
    UNIT=/lib/systemd/system/gpu-server.service
    [ -f "$UNIT" ] || UNIT=/usr/lib/systemd/system/gpu-server.service
    id rgpu && ok "user rgpu" || fail "no user rgpu"
    AS_USER=(setpriv --reuid=rgpu --regid=rgpu --init-groups --no-new-privs --)
    RGPU=/usr/bin/rgpu
else
    echo "note: not root: the packages unpacked into $LOGS/installed.root and run as $(id -un)"
    PREFIX=$LOGS/installed.root
    rm -rf "$PREFIX"
    dpkg-deb -x "$SERVER_DEB" "$PREFIX" && dpkg-deb -x "$CLIENT_DEB" "$PREFIX" || exit 1
    UNIT=$PREFIX/lib/systemd/system/gpu-server.service
    AS_USER=()
    RGPU=$PREFIX/usr/bin/rgpu
fi

# The packaged config does not start without a tenant (require_tenants = yes): one, as an
# operator adds it; every client below names it.
printf '\n[tenant gpu-test]\ntoken_sha256 = %s\n' "$(printf %s gpu-test-secret | sha256sum | cut -d' ' -f1)" \
    >>"$PREFIX/etc/rgpu/server.conf"
export RGPU_TENANT=gpu-test RGPU_TOKEN=gpu-test-secret
# The server, as the unit starts it (paths under PREFIX when unpacked rather than installed).
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT" | sed "s|/usr/sbin/|$PREFIX/usr/sbin/|; s|/etc/rgpu/|$PREFIX/etc/rgpu/|")
if [ -n "${DRY_DRIVER:-}" ]; then
    DRY=$(mktemp -d /tmp/rgpu-dry.XXXXXX) && cp "$DRY_DRIVER" "$DRY/" && chmod -R a+rX "$DRY"
    EXEC="$EXEC --driver $DRY/$(basename "$DRY_DRIVER")"
    echo "note: DRY RUN on $DRY_DRIVER (no GPU result)"
fi
ENVS=$(sed -n 's/^Environment=//p' "$UNIT")
[ -n "$PREFIX" ] && ENVS="$ENVS CUDA_CACHE_PATH=$LOGS/installed.cache/cuda" &&
    sed -i "s|^module_cache = .*|module_cache = $LOGS/installed.cache|" "$PREFIX/etc/rgpu/server.conf"
LIBS=""
ldd ${EXEC%% *} | grep -q "not found" && LIBS=$B/deps &&
    echo "note: gpu-server's libraries from $B/deps: $(ldd ${EXEC%% *} | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
echo "ExecStart: $EXEC (as ${AS_USER[*]:-$(id -un)}, $ENVS)"
# shellcheck disable=SC2086
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin ${LIBS:+LD_LIBRARY_PATH=$LIBS} $ENVS "${AS_USER[@]}" \
    $EXEC >"$LOGS/installed.server.log" 2>&1 &
SERVER_PID=$!
PORT=$(sed -n 's/^port *= *//p' "${PREFIX}/etc/rgpu/server.conf")
for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
    sleep 0.1
done
grep -q "listening on" "$LOGS/installed.server.log" && ok "installed gpu-server listens on $PORT" ||
    { fail "gpu-server did not start"; cat "$LOGS/installed.server.log"; exit 1; }
head -5 "$LOGS/installed.server.log"

# PyTorch, natively and through the installed client; same output.
T=$ROOT/tests/gpu/torch_smoke.py
PROGRAM=(python3 "$T")
[ -n "${DRY_DRIVER:-}" ] && PROGRAM=("$B/bin/vadd_static")
# Output of a run through rgpu ($1) is right: PASS, and the native output (not in a dry run).
same_as_native() {
    grep -q PASS "$1" && { [ -n "${DRY_DRIVER:-}" ] || cmp -s "$LOGS/installed.torch.native" "$1"; }
}
CLIB=""
ldd "$(dirname "$RGPU")/../lib/rgpu/libcuda.so.1" | grep -q "not found" && CLIB=$B/deps
if [ -n "${DRY_DRIVER:-}" ]; then : >"$LOGS/installed.torch.native"; else
    python3 "$T" >"$LOGS/installed.torch.native" 2>"$LOGS/installed.torch.native.err"; fi
rn=$?
[ -n "$CLIB" ] && export LD_LIBRARY_PATH=$CLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$RGPU" run --server 127.0.0.1:"$PORT" -- "${PROGRAM[@]}" \
    >"$LOGS/installed.torch.rgpu" 2>"$LOGS/installed.torch.rgpu.err"
rr=$?
if [ $rn -eq 0 ] && [ $rr -eq 0 ] && same_as_native "$LOGS/installed.torch.rgpu"; then
    ok "torch_smoke through the installed client and server: same output as native"
else
    fail "torch_smoke: native=$rn rgpu=$rr"
    diff "$LOGS/installed.torch.native" "$LOGS/installed.torch.rgpu" | head
    tail -5 "$LOGS/installed.torch.rgpu.err"
fi
grep -q "session 1 " "$LOGS/installed.server.log" && ok "the installed server logged the session" ||
    fail "no session in the server log"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID"; rc=$?; SERVER_PID=
[ $rc -eq 0 ] && ok "gpu-server exit 0 on SIGTERM" || fail "gpu-server exit $rc on SIGTERM"

# The sandbox's system call filter against the real driver: the same server and program
# under strace (bundled), every call and socket family checked against the unit's lists
# (bundle.sh wrote them with tools/unit_syscalls.py --dump).
if [ -x "$B/bin/strace" ] && [ -f "$B/deb/allowed-syscalls.txt" ]; then
    TR=$(mktemp -d /tmp/rgpu-strace.XXXXXX)
    cp "$B/bin/strace" "$TR/"
    for l in $(LD_LIBRARY_PATH=$B/deps ldd "$B/bin/strace" | awk '/=> \//{print $3}'); do
        case $l in "$B"/deps/*) cp "$l" "$TR/" ;; esac
    done
    chmod -R a+rwX "$TR"
    # shellcheck disable=SC2086
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin ${LIBS:+LD_LIBRARY_PATH=$LIBS} $ENVS "${AS_USER[@]}" \
        env LD_LIBRARY_PATH="$TR${LIBS:+:$LIBS}" "$TR/strace" -f -qq -o "$TR/log" \
        env -u LD_LIBRARY_PATH ${LIBS:+LD_LIBRARY_PATH=$LIBS} $EXEC \
        >"$LOGS/installed.strace.server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 300); do
        (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
        sleep 0.1
    done
    RGPU_CONNECT_TIMEOUT_MS=60000 "$RGPU" run --server 127.0.0.1:"$PORT" -- "${PROGRAM[@]}" \
        >"$LOGS/installed.strace.torch" 2>"$LOGS/installed.strace.torch.err"
    same_as_native "$LOGS/installed.strace.torch" ||
        fail "torch_smoke under strace: $(tail -3 "$LOGS/installed.strace.torch.err")"
    kill -TERM $(cat /proc/"$SERVER_PID"/task/*/children 2>/dev/null) 2>/dev/null
    wait "$SERVER_PID"; SERVER_PID=
    if MSG=$(python3 "$ROOT/tools/unit_syscalls.py" --allowed "$B/deb/allowed-syscalls.txt" "$TR/log"); then
        ok "sandbox with the real driver: $MSG"
    else
        fail "sandbox with the real driver: $MSG"
    fi
    grep -oE '^[0-9]+ +[a-z0-9_]+\(' "$TR/log" | awk '{print $2}' | sort | uniq -c | sort -rn \
        >"$LOGS/installed.syscalls.txt"
    rm -rf "$TR"
else
    echo "note: no strace in the bundle; the system call filter is not checked here"
fi

# Where systemd runs this host, the unit itself, sandbox and all: start (returns once the
# server sent READY=1), the same PyTorch program, reload, journal priorities, stop.
if [ "$INSTALLED" = 1 ] && [ -d /run/systemd/system ]; then
    if [ -n "$LIBS" ]; then
        # A copy in /run: the unit cannot see a bundle under /home or /root (ProtectHome).
        rm -rf /run/rgpu-installed-deps && cp -r "$LIBS" /run/rgpu-installed-deps &&
            chmod -R a+rX /run/rgpu-installed-deps
        mkdir -p /run/systemd/system/gpu-server.service.d
        printf '[Service]\nEnvironment=LD_LIBRARY_PATH=/run/rgpu-installed-deps\n' \
            >/run/systemd/system/gpu-server.service.d/deps.conf
        echo "note: the unit gets LD_LIBRARY_PATH=/run/rgpu-installed-deps (a copy of $LIBS)"
    fi
    systemctl daemon-reload
    if timeout 60 systemctl start gpu-server && systemctl is-active -q gpu-server; then
        ok "systemctl start gpu-server (Type=notify: active once READY=1)"
    else
        fail "systemctl start gpu-server"; systemctl status gpu-server --no-pager | tail -20
    fi
    "$RGPU" run --server 127.0.0.1:"$PORT" -- "${PROGRAM[@]}" >"$LOGS/installed.unit.torch" \
        2>"$LOGS/installed.unit.torch.err"
    same_as_native "$LOGS/installed.unit.torch" &&
        ok "torch_smoke through the sandboxed unit: same output as native" ||
        { fail "torch_smoke through the unit"; tail -5 "$LOGS/installed.unit.torch.err";
          journalctl -u gpu-server --no-pager | tail -20; }
    systemctl reload gpu-server && sleep 1 && systemctl is-active -q gpu-server &&
        journalctl -u gpu-server --no-pager | grep -q "SIGHUP" && ok "systemctl reload" ||
        fail "systemctl reload"
    journalctl -u gpu-server -p info --no-pager -o json | grep -q '"PRIORITY":"6"' &&
        ok "journal entries carry priorities" || fail "no priority-6 entries in the journal"
    journalctl -u gpu-server --no-pager >"$LOGS/installed.journal.log"
    systemctl stop gpu-server && ! systemctl is-active -q gpu-server && ok "systemctl stop" ||
        fail "systemctl stop"
    rm -rf /run/systemd/system/gpu-server.service.d /run/rgpu-installed-deps
    systemctl daemon-reload
fi

if [ "$INSTALLED" = 1 ]; then
    INSTALLED=0
    dpkg --purge rgpu-client rgpu-server >"$LOGS/installed.purge.log" 2>&1 || fail "dpkg --purge"
    left=""
    for f in /usr/sbin/gpu-server /usr/bin/rgpu /usr/lib/rgpu /etc/rgpu /var/cache/rgpu "$UNIT"; do
        [ -e "$f" ] && left="$left $f"
    done
    getent passwd rgpu >/dev/null && left="$left user:rgpu"
    getent group rgpu >/dev/null && left="$left group:rgpu"
    [ -z "$left" ] && ok "purge left nothing" || fail "left after purge:$left"
fi
cp "$LOGS"/installed.* "${OUT:-/tmp}/" 2>/dev/null
[ $FAILS -eq 0 ] && echo "installed: all checks passed" || echo "installed: $FAILS check(s) failed"
exit $((FAILS > 0))
