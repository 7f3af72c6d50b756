#!/bin/bash
# Slurm end to end on one machine (docs/slurm.md): munged, slurmctld and slurmd from Debian's
# packages, configured in a temporary directory (their own ports, sockets and state: nothing of
# the host's Slurm is used), with rgpu's SPANK plugin and job_submit.lua, and gpu-servers on the
# fake driver. Shows, against a pool of one GPU (license rgpu:100, sized by rgpu-slurm-licenses):
#   srun --rgpu=1 ./program runs through rgpu's client, placed on the pool's server;
#   two sbatch --rgpu=1 jobs: the second pends (reason Licenses) while the first holds the GPU,
#   and runs when it ends; both pass;
#   a cancelled job's session ends on the server and its license is freed;
#   a step whose pool has no room (taken outside Slurm) fails with the reason in its output and
#   the node stays in service;
#   --rgpu=2 is refused at submission with the pool's size in the message (and slurmctld
#   itself refuses -L rgpu:200 from a client without the plugin); bad values are refused; a step
#   claiming a request its job holds no license for is not placed;
#   two --rgpu-share=50 jobs share the GPU at once;
# then, with a second server and the license resized to rgpu:200, sbatch --rgpu=2 gets two
# devices on the two servers, and salloc --rgpu=1 places its steps.
# Needs root (slurmd runs jobs as their user) and the packages tools/test.sh installs; exits
# 77 (skipped, with the reason) only when Slurm cannot run here.
# Usage: slurm_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root: slurmd runs jobs as their users"
for b in munged mungekey slurmctld slurmd srun sbatch salloc squeue scontrol scancel; do
    command -v "$b" >/dev/null || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null ||
        skip "$b is not installed (Debian: munge slurmctld slurmd slurm-client)"
done
export PATH=$PATH:/usr/sbin
PLUGIN=$BUILD/lib/rgpu_spank.so
[ -f "$PLUGIN" ] || skip "$PLUGIN was not built (Debian: libslurm-dev)"
LUA_PLUGIN=$(ls /usr/lib/*/slurm-wlm/job_submit_lua.so /usr/lib/slurm/job_submit_lua.so 2>/dev/null | head -1)
[ -n "$LUA_PLUGIN" ] || skip "Slurm's job_submit/lua plugin is not installed"

. "$BUILD/../tests/worker/tenant_lib.sh" 2>/dev/null || . "$(dirname "$0")/../worker/tenant_lib.sh"
PROG=$BUILD/tests/slurm/rgpu_devices
LICENSES=$BUILD/bin/rgpu-slurm-licenses
RGPU=$BUILD/bin/rgpu
unset RGPU_SERVER RGPU_POOL RGPU_CONFIG RGPU_POLICY RGPU_TENANT RGPU_TOKEN RGPU_MEM_QUOTA
unset LD_LIBRARY_PATH SLURM_JOB_ID SLURM_JOBID
export HOME=$WORK RGPU_NCCL=0 ASAN_OPTIONS=detect_leaks=0
export FAKECUDA_MEM_MB=1024 RGPU_TRANSPORT=tcp

SLURM_PIDS=()
slurm_cleanup() {
    if [ -n "${SLURM_CONF:-}" ] && [ -n "${CTLD_UP:-}" ]; then
        scancel --quiet --user=root 2>/dev/null
        for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    for p in "${SLURM_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SLURM_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    cleanup
}
trap slurm_cleanup EXIT
[ -n "${KEEP:-}" ] && echo "work directory: $WORK"

# ---- gpu-servers on the fake driver: tenant alpha may hold the whole 1 GiB GPU ---------------
cat >"$WORK/server.conf" <<CONF
[tenant alpha]
token = alpha-secret
mem_quota = 1GiB
CONF
start_server() { # name
    local port
    port=$(free_port)
    "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$port" --driver "$FAKE" \
        --name "$1" >"$WORK/server-$1.log" 2>&1 &
    PIDS+=($!)
    wait_for "$WORK/server-$1.log" "listening on" || exit 1
    eval "PORT_$1=$port"
}
start_server A
A=127.0.0.1:$PORT_A
printf 'alpha-secret\n' >"$WORK/alpha.token"
chmod 600 "$WORK/alpha.token"
write_client_conf() { # pool
    cat >"$WORK/client.conf" <<CONF
[client]
pool = $1
tenant = alpha
token_file = $WORK/alpha.token
CONF
}
write_client_conf "$A"
sessions() { # alpha's sessions on each server of the pool, in order ("1 0")
    RGPU_CONFIG=$WORK/client.conf "$RGPU" status --json |
        python3 -c 'import json,sys;print(" ".join(str(s.get("tenant_sessions","-")) for s in json.load(sys.stdin)["servers"]))'
}

# ---- munge and Slurm in $WORK ------------------------------------------------------------------
mkdir -p "$WORK/munge" "$WORK/state" "$WORK/spool" "$WORK/log"
chmod 700 "$WORK/munge"
chmod 755 "$WORK"
mungekey -c -k "$WORK/munge/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$WORK/munge/munge.key" bs=128 count=1 status=none
chmod 600 "$WORK/munge/munge.key"
munged -F -f --socket="$WORK/munge/sock" --key-file="$WORK/munge/munge.key" \
    --pid-file="$WORK/munge/pid" --seed-file="$WORK/munge/seed" \
    --log-file="$WORK/log/munged.log" >"$WORK/log/munged.out" 2>&1 &
SLURM_PIDS+=($!)
for _ in $(seq 50); do [ -S "$WORK/munge/sock" ] && break; sleep 0.1; done
[ -S "$WORK/munge/sock" ] || skip "munged cannot start here: $(cat "$WORK/log/munged.out")"

LICENSE_LINE=$(RGPU_CONFIG=$WORK/client.conf "$LICENSES" 2>"$WORK/licenses.err")
check "rgpu-slurm-licenses sizes the license from a pool of one GPU ($LICENSE_LINE)" \
    test "$LICENSE_LINE" = "Licenses=rgpu:100"
NODE=rgpunode
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
export SLURM_CONF=$WORK/slurm.conf
write_slurm_conf() { # Licenses= line
    cat >"$SLURM_CONF" <<CONF
ClusterName=rgputest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait=2
PlugStackConfig=$WORK/plugstack.conf
JobSubmitPlugins=lua
$1
NodeName=$NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
}
write_slurm_conf "$LICENSE_LINE"
cp "$(dirname "$0")/../../slurm/job_submit.lua" "$WORK/job_submit.lua"
echo "required $PLUGIN libdir=$BUILD/lib config=$WORK/client.conf" >"$WORK/plugstack.conf"

slurmctld -D -i >"$WORK/log/slurmctld.out" 2>&1 &
SLURM_PIDS+=($!)
CTLD_UP=1
slurmd -D -N "$NODE" >"$WORK/log/slurmd.out" 2>&1 &
SLURM_PIDS+=($!)
state=""
for _ in $(seq 150); do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
if [ "$state" != idle ]; then
    echo "--- slurmctld:"; tail -20 "$WORK/log/slurmctld.log" "$WORK/log/slurmctld.out" 2>/dev/null
    echo "--- slurmd:"; tail -20 "$WORK/log/slurmd.log" "$WORK/log/slurmd.out" 2>/dev/null
    skip "slurmctld and slurmd did not bring node $NODE up here (state '$state')"
fi
ok "slurmctld, slurmd and munged of Debian's packages run in $WORK"

job_state() { squeue -h -j "$1" -o %T 2>/dev/null; }
job_reason() { squeue -h -j "$1" -o %r 2>/dev/null; }
wait_job_gone() { # jobid: until it left the queue
    for _ in $(seq 300); do [ -z "$(job_state "$1")" ] && return 0; sleep 0.1; done
    return 1
}
wait_state() { # jobid state
    for _ in $(seq 300); do [ "$(job_state "$1")" = "$2" ] && return 0; sleep 0.1; done
    return 1
}
license_used() { scontrol show license rgpu | sed -n 's/.*Used=\([0-9]*\).*/\1/p'; }
submit() { # name sbatch-args... -> job id in $JOB_<name>; output in $WORK/<name>.out
    local name=$1; shift
    local id
    id=$(sbatch --parsable -o "$WORK/$name.out" -e "$WORK/$name.out" "$@" 2>"$WORK/$name.submit")
    eval "JOB_$name=$id"
    [ -n "$id" ]
}

# ---- srun --rgpu=1 ./program -------------------------------------------------------------------
srun --rgpu=1 -o "$WORK/srun.out" sh -c 'echo "servers=$RGPU_SLURM_SERVERS tenant=$RGPU_TENANT"; exec "$0"' "$PROG" >/dev/null 2>"$WORK/srun.err"
rc=$?
check "srun --rgpu=1 ./program passes through rgpu (exit $rc: $(tr '\n' ' ' <"$WORK/srun.out"))" \
    grep -q "^PASS devices=1" "$WORK/srun.out"
check "... placed on the pool's server, as tenant alpha" \
    grep -q "^servers=$A tenant=alpha" "$WORK/srun.out"
check "... through rgpu's libcuda (the server served it)" grep -q "tenant=alpha" "$WORK/server-A.log"

# ---- two jobs, one GPU: the second pends until the first ends -----------------------------------
rm -f "$WORK/release-1"
submit one --rgpu=1 --wrap "exec $PROG 16 $WORK/release-1"
wait_for "$WORK/one.out" "^ready" >/dev/null
check "job 1 ($JOB_one) runs and holds the GPU (sessions: $(sessions))" test "$(sessions)" = 1
submit two --rgpu=1 --wrap "exec $PROG 16"
reason=""
for _ in $(seq 100); do reason=$(job_reason "$JOB_two"); [ "$reason" = Licenses ] && break; sleep 0.1; done
check "job 2 ($JOB_two) pends in Slurm's queue, reason Licenses ($(job_state "$JOB_two") $reason)" \
    test "$(job_state "$JOB_two") $reason" = "PENDING Licenses"
check "... the license counts job 1 (used $(license_used) of 100)" test "$(license_used)" = 100
touch "$WORK/release-1"
wait_job_gone "$JOB_one"
check "job 1 passes once released" grep -q "^PASS devices=1" "$WORK/one.out"
wait_job_gone "$JOB_two"
check "job 2 runs after it and passes ($(tr '\n' ' ' <"$WORK/two.out"))" \
    grep -q "^PASS devices=1" "$WORK/two.out"

# ---- a cancelled job gives its session and its license back -------------------------------------
submit three --rgpu=1 --wrap "exec $PROG 16 $WORK/never"
wait_for "$WORK/three.out" "^ready" >/dev/null
check "job 3 ($JOB_three) holds a session on the server ($(sessions))" test "$(sessions)" = 1
scancel "$JOB_three"
wait_job_gone "$JOB_three"
left=1
for _ in $(seq 100); do [ "$(sessions)" = 0 ] && left=0 && break; sleep 0.1; done
check "scancel: the server sees the session end (sessions: $(sessions))" test $left = 0
check "... and slurmctld frees the license (used $(license_used))" test "$(license_used)" = 0

# ---- room taken outside Slurm: the step fails with the reason, the node stays in service -------
env RGPU_SERVER="$A" RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret LD_LIBRARY_PATH="$BUILD/lib" \
    "$BUILD/tests/integration/hold_memory" 16 120 >"$WORK/outside.out" 2>&1 &
OUTSIDE=$!
PIDS+=($OUTSIDE)
wait_for "$WORK/outside.out" "ready" >/dev/null
srun --rgpu=1 "$PROG" >"$WORK/noroom.out" 2>&1
rc=$?
check "a step the pool has no room for fails (exit $rc) saying why: $(grep -m1 "rgpu:" "$WORK/noroom.out" | cut -c1-150)" \
    grep -q "no room in the pool for --rgpu=1" "$WORK/noroom.out"
for _ in $(seq 100); do # the failed step's job completes first
    case "$(sinfo -h -n "$NODE" -o %T)" in completing | allocated | mixed) sleep 0.1 ;; *) break ;; esac
done
check "... and the node stays in service ($(sinfo -h -n "$NODE" -o %T))" \
    test "$(sinfo -h -n "$NODE" -o %T)" = idle
kill -9 "$OUTSIDE" 2>/dev/null
wait "$OUTSIDE" 2>/dev/null
for _ in $(seq 100); do [ "$(sessions)" = 0 ] && break; sleep 0.1; done

# ---- refused at submission ---------------------------------------------------------------------
sbatch --rgpu=2 --wrap true >"$WORK/big.out" 2>&1
rc=$?
check "sbatch --rgpu=2 on a pool of one GPU is refused at submission (exit $rc): $(head -1 "$WORK/big.out")" \
    grep -q "asks for 2 GPU(s) but the rgpu pool has 1.00 (license rgpu:100): this job could never start" "$WORK/big.out"
sbatch -L rgpu:200 --wrap true >"$WORK/big-L.out" 2>&1
check "... slurmctld refuses it too without the plugin's check: $(tail -1 "$WORK/big-L.out")" \
    grep -q "Invalid license specification" "$WORK/big-L.out"
sbatch --rgpu=x --wrap true >"$WORK/bad.out" 2>&1
check "--rgpu=x is refused with the accepted form" grep -q "the number of remote GPUs, 1 to 64" "$WORK/bad.out"
sbatch --rgpu=1 --rgpu-share=50 --wrap true >"$WORK/bad-share.out" 2>&1
check "--rgpu-share without --rgpu-mem is refused with the reason" \
    grep -q "needs --rgpu-mem=SIZE" "$WORK/bad-share.out"
check "nothing refused reached the queue" test -z "$(squeue -h -o %i)"
# a step whose environment claims a request slurmctld never counted (no license held): refused
SLURM_SPANK_RGPU_GPUS=1 srun "$PROG" >"$WORK/uncounted.out" 2>&1
check "a step asking for GPUs its job holds no license for is not placed: $(grep -m1 -o "holds 0 of license rgpu.*" "$WORK/uncounted.out" | cut -c1-80)" \
    grep -q "holds 0 of license rgpu, its --rgpu asks for 100: slurmctld did not count this request" "$WORK/uncounted.out"

# ---- --rgpu-share=50: two jobs on the one GPU at once ------------------------------------------
rm -f "$WORK/release-s"
submit s1 --rgpu=1 --rgpu-share=50 --rgpu-mem=400MiB --wrap "exec $PROG 16 $WORK/release-s"
submit s2 --rgpu=1 --rgpu-share=50 --rgpu-mem=400MiB --wrap "exec $PROG 16 $WORK/release-s"
wait_for "$WORK/s1.out" "^ready" >/dev/null
wait_for "$WORK/s2.out" "^ready" >/dev/null
check "two --rgpu-share=50 jobs hold the one GPU at once (sessions $(sessions), license used $(license_used))" \
    test "$(sessions) $(license_used)" = "2 100"
touch "$WORK/release-s"
wait_job_gone "$JOB_s1"; wait_job_gone "$JOB_s2"
check "... both pass" test "$(grep -c "^PASS" "$WORK/s1.out" "$WORK/s2.out" | grep -c ':1$')" = 2

# ---- a pool of two: sbatch --rgpu=2 ------------------------------------------------------------
start_server B
B=127.0.0.1:$PORT_B
write_client_conf "$A,$B"
LICENSE_LINE=$(RGPU_CONFIG=$WORK/client.conf "$LICENSES" 2>>"$WORK/licenses.err")
check "rgpu-slurm-licenses: a pool of two GPUs is $LICENSE_LINE" test "$LICENSE_LINE" = "Licenses=rgpu:200"
write_slurm_conf "$LICENSE_LINE"
scontrol reconfigure
for _ in $(seq 100); do scontrol show license rgpu | grep -q "Total=200" && break; sleep 0.1; done
submit pair --rgpu=2 --wrap "echo servers=\$RGPU_SLURM_SERVERS; exec $PROG 16"
wait_job_gone "$JOB_pair"
check "sbatch --rgpu=2 gets two devices ($(tr '\n' ' ' <"$WORK/pair.out"))" \
    grep -q "^PASS devices=2" "$WORK/pair.out"
check "... on the two servers" grep -Eq "^servers=($A,$B|$B,$A)$" "$WORK/pair.out"
salloc --rgpu=1 srun sh -c 'echo "servers=$RGPU_SLURM_SERVERS"; exec "$0"' "$PROG" >"$WORK/salloc.out" 2>&1
check "salloc --rgpu=1 srun ./program passes ($(grep -v '^salloc:' "$WORK/salloc.out" | tr '\n' ' '))" \
    grep -q "^PASS devices=1" "$WORK/salloc.out"

echo "$FAILS failed"
if [ "$FAILS" -ne 0 ]; then
    echo "--- slurmctld.log (last lines)"; tail -15 "$WORK/log/slurmctld.log"
    echo "--- slurmd.log (last lines)"; tail -25 "$WORK/log/slurmd.log"
fi
[ "$FAILS" -eq 0 ]
