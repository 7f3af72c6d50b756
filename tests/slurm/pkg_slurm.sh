#!/bin/bash
# The rgpu-slurm package (cmake/packaging.cmake's slurm block) on this machine (root): lint it,
# install it with rgpu-client, check that Debian's /etc/slurm/plugstack.conf loads the plugin
# from its packaged place (srun, sbatch and salloc list --rgpu), that the plugin's default
# library directory is the client's, that rgpu-slurm-licenses and job_submit.lua are where
# docs/slurm.md says, then purge both and check nothing is left. Run by tools/test.sh after
# tools/pkg_test.sh, which builds the packages (cpack). The whole flow with slurmctld and jobs
# is tests/slurm/slurm_e2e.sh (ctest) on the build tree's files.
# Usage: tests/slurm/pkg_slurm.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
WORK=$(mktemp -d /tmp/rgpu-pkg-slurm.XXXXXX)
FAILS=0
INSTALLED=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
cleanup() {
    [ "$INSTALLED" = 1 ] && dpkg --purge rgpu-slurm rgpu-client >"$WORK/purge.log" 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
    echo "pkg_slurm: needs root (installs and purges the packages); skipped"
    exit 0
fi
SLURM_DEB=$(ls "$BUILD"/rgpu-slurm_*.deb 2>/dev/null)
CLIENT_DEB=$(ls "$BUILD"/rgpu-client_*.deb 2>/dev/null)
if [ -z "$SLURM_DEB" ]; then
    if [ -f /usr/include/slurm/spank.h ]; then
        echo "FAIL no rgpu-slurm package in $BUILD although slurm/spank.h is installed"
        exit 1
    fi
    echo "pkg_slurm: slurm/spank.h is not installed (libslurm-dev): rgpu-slurm is not built; skipped"
    exit 0
fi
if dpkg-query -W -f='${Status}' rgpu-slurm rgpu-client 2>/dev/null | grep -q "ok installed"; then
    echo "pkg_slurm: rgpu packages are installed on this machine already; not touching them" >&2
    exit 1
fi

lintian --fail-on error,warning --suppress-tags initial-upload-closes-no-bugs \
    "$SLURM_DEB" >"$WORK/lintian.log" 2>&1
check "lintian rgpu-slurm: no errors or warnings" test $? = 0 || cat "$WORK/lintian.log"
check "it depends on the Slurm release it was built for ($(dpkg-deb -f "$SLURM_DEB" Depends))" \
    eval 'dpkg-deb -f "$SLURM_DEB" Depends | grep -Eq "slurm-client \(>= [0-9]+\.[0-9]+\), slurm-client \(<< [0-9]+\.[0-9]+\)"'
DEBIAN_FRONTEND=noninteractive dpkg -i "$CLIENT_DEB" "$SLURM_DEB" >"$WORK/install.log" 2>&1
rc=$?
INSTALLED=1
check "rgpu-client and rgpu-slurm install (exit $rc)" test $rc = 0 || cat "$WORK/install.log"
check "the plugin is in /usr/lib/rgpu/slurm, its plugstack line in plugstack.conf.d (a conffile)" \
    eval 'test -f /usr/lib/rgpu/slurm/rgpu_spank.so &&
          grep -q "^optional /usr/lib/rgpu/slurm/rgpu_spank.so" /etc/slurm/plugstack.conf.d/rgpu.conf &&
          dpkg-query -W -f="\${Conffiles}" rgpu-slurm | grep -q plugstack.conf.d/rgpu.conf'
check "job_submit.lua and the man page are installed" \
    test -f /usr/share/rgpu-slurm/job_submit.lua -a -f /usr/share/man/man1/rgpu-slurm-licenses.1.gz

# A slurm.conf of its own that names Debian's plugstack.conf (which includes plugstack.conf.d):
# srun, sbatch and salloc load the installed plugin and list its options (no daemon needed).
cat >"$WORK/slurm.conf" <<CONF
ClusterName=pkgtest
SlurmctldHost=localhost(127.0.0.1)
PlugStackConfig=/etc/slurm/plugstack.conf
NodeName=n1 NodeAddr=127.0.0.1 CPUs=1
PartitionName=p Nodes=n1 Default=YES
CONF
for cmd in srun sbatch salloc; do
    SLURM_CONF=$WORK/slurm.conf $cmd --help >"$WORK/$cmd.help" 2>&1
    check "$cmd --help lists --rgpu, --rgpu-mem, --rgpu-share from the installed plugin" \
        test "$(grep -cE -- '--rgpu(-mem|-share)?=' "$WORK/$cmd.help")" = 3
done
check "the plugin's default library directory is the client's (/usr/lib/rgpu/libcuda.so.1)" \
    eval 'strings /usr/lib/rgpu/slurm/rgpu_spank.so | grep -qx /usr/lib/rgpu && test -e /usr/lib/rgpu/libcuda.so.1'
RGPU_POOL=127.0.0.1:1 rgpu-slurm-licenses >"$WORK/lic.out" 2>"$WORK/lic.err"
check "rgpu-slurm-licenses runs (exit $? with no server: 1) and names the server not counted" \
    grep -q "not counted: 127.0.0.1:1" "$WORK/lic.err"

dpkg --purge rgpu-slurm rgpu-client >"$WORK/purge.log" 2>&1
INSTALLED=0
LEFT=""
for f in /usr/lib/rgpu/slurm /etc/slurm/plugstack.conf.d/rgpu.conf /usr/share/rgpu-slurm \
    /usr/bin/rgpu-slurm-licenses /usr/share/doc/rgpu-slurm; do
    [ -e "$f" ] && LEFT="$LEFT $f"
done
check "purge leaves nothing of rgpu-slurm${LEFT:+ (left:$LEFT)}" test -z "$LEFT"
echo "$FAILS failed"
[ "$FAILS" -eq 0 ]
