#!/bin/bash
# Issue 27, items 7 (the CLI's numbers), 9 (metrics for a cluster) and 11 (CLI conventions) on
# the fake driver: one gpu-server with tenant alpha (1 GiB quota on a 4 GiB card), its private
# metrics listener and its public one.
# Shows: --version on both tools; strict numbers (nan, 1e-300, 3x, overflow refused before any
# probe); getopt_long everywhere (--opt=value, `rgpu run --gpus 2 -- cmd`); status --once
# without top's header; -o json|wide, --no-headers, --query-gpu/--format=csv; the SERVER column
# whole; one JSON schema (status, ping, /status); ping light by default; --memory and --share
# above the tenant's quota refused (status says ADMIT no) and within it granted exactly;
# /metrics and /healthz on metrics_public_listen without a token, /status not there; every
# metric with HELP and TYPE (promtool check metrics).
# Usage: ops_e2e.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
. "$(dirname "$0")/tenant_lib.sh"
HOLD=$BUILD/tests/integration/hold_memory
RGPU=$BUILD/bin/rgpu
export LD_LIBRARY_PATH=$BUILD/lib RGPU_LIBDIR=$BUILD/lib FAKECUDA_MEM_MB=4096
export RGPU_TENANT=alpha RGPU_TOKEN=alpha-secret RGPU_TRANSPORT=tcp RGPU_NCCL=0
unset RGPU_SERVER RGPU_POOL RGPU_CONFIG RGPU_POLICY RGPU_MEM_QUOTA RGPU_MEM_SHARE RGPU_GPUS
export HOME=$WORK

PORT=$(free_port) MPRIV=$(free_port) MPUB=$(free_port)
cat >"$WORK/server.conf" <<CONF
[server]
metrics_listen = 127.0.0.1:$MPRIV
metrics_public_listen = 127.0.0.1:$MPUB
[tenant alpha]
token = alpha-secret
mem_quota = 1GiB
CONF
"$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$PORT" --driver "$FAKE" \
    --name ops-test >"$WORK/server.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/server.log" "listening on" || exit 1
S=127.0.0.1:$PORT
http() { # URL -> "CODE BODY" (no token)
    python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
probes() { grep -c "worker pid" "$WORK/server.log"; }
# hold_memory keeps its buffers to the end (and LeakSanitizer's exit would drop its PASS line)
NOLEAK() { ASAN_OPTIONS=detect_leaks=0 "$@"; }
json() { python3 -c "import json,sys;d=json.load(sys.stdin);print($1)"; }

# ---- --version -------------------------------------------------------------------------------
check "rgpu --version" eval '"$RGPU" --version | grep -q "^rgpu [0-9.]* (protocol 1\.[0-9]*, JSON schema 1)$"'
check "rgpu status --version" eval '"$RGPU" status --version | grep -q "^rgpu "'
check "gpu-server --version" eval '"$SERVER" --version | grep -q "^gpu-server [0-9.]* (protocol 1\.[0-9]*)$"'

# ---- item 7: numbers refused before anything is probed ----------------------------------------
before=$(probes)
for args in "top --interval nan" "top --interval 1e-300" "top --interval 0.01" "top -d inf" \
    "ping --count 99999999999" "ping --count 3x" "ping --count -1" "ping -c 0" \
    "run --gpus 2x -- true" "run --gpus 65 -- true" "run --share 1.5 -- true" "run --share nan -- true"; do
    # shellcheck disable=SC2086 # args is a word list
    timeout 10 "$RGPU" $args --server "$S" >"$WORK/num.out" 2>&1
    rc=$?
    opt=$(echo "$args" | awk '{print $2}')
    check "rgpu $args: exit 2 with a message naming the option (exit $rc: $(head -c 120 "$WORK/num.out"))" \
        eval '[ $rc = 2 ] && grep -q -- "${opt#-?}.*not valid (expected" "$WORK/num.out"'
done
check "... and not one probe reached the server ($before -> $(probes) workers)" test "$(probes)" = "$before"

# ---- item 11: getopt_long, --opt=value, run's options before -- --------------------------------
check "rgpu run --gpus 2 -- cmd runs cmd with the option taken" \
    test "$("$RGPU" run --gpus 2 -- sh -c 'echo "$RGPU_GPUS"')" = 2
check "rgpu run --server=H:P CMD (--opt=value)" \
    test "$("$RGPU" run --server="$S" sh -c 'echo "$RGPU_SERVER"')" = "$S"
check "rgpu run -n 1 -p 25% (Bitfusion's short options)" \
    test "$("$RGPU" run -n 1 -p 25% -- sh -c 'echo "$RGPU_GPUS $RGPU_MEM_SHARE"')" = "1 25%"
check "options after CMD are CMD's" \
    test "$("$RGPU" run -- sh -c 'echo "$1"' x --gpus)" = "--gpus"
check "rgpu status --server=H:P" eval '"$RGPU" status --server="$S" >/dev/null'
"$RGPU" status --once --server "$S" >"$WORK/once.txt" 2>&1
check "rgpu status --once prints no top header (exit $?)" \
    eval '! grep -q "rgpu top" "$WORK/once.txt" && head -1 "$WORK/once.txt" | grep -q "^SERVER "'
check "rgpu top --once prints its header" eval '"$RGPU" top --once -s "$S" | head -1 | grep -q "^rgpu top - "'
"$RGPU" status --interval 1 -s "$S" >"$WORK/bad.out" 2>&1
check "an option of another command is refused (exit $?)" \
    grep -q "rgpu status: unknown option --interval" "$WORK/bad.out"

# ---- output: -o wide, --no-headers, --query-gpu --format=csv, the SERVER column ----------------
LONG=a-pool-entry-with-a-rather-long-host-name.invalid:7070
"$RGPU" status --pool "$S,$LONG" >"$WORK/long.txt" 2>&1
check "the SERVER column is not cut ($LONG)" grep -q "^$LONG  " "$WORK/long.txt"
check "-o wide adds QUOTA, TENANT-SESSIONS, SERVER-NAME" \
    eval '"$RGPU" status -o wide -s "$S" | head -1 | grep -q "ADMIT  *QUOTA  TENANT-SESSIONS  SERVER-NAME  WHY-NOT$"'
check "... with the figures (1.00GiB quota, server name)" \
    eval '"$RGPU" status -o wide -s "$S" | grep -q "yes  *1.00GiB  *0  ops-test$"'
check "--no-headers: the rows alone" \
    test "$("$RGPU" status --no-headers -s "$S" | wc -l) $("$RGPU" status --no-headers -s "$S" | grep -c '^127')" = "1 1"
check "--query-gpu --format=csv (nvidia-smi's form)" test "$("$RGPU" status \
    --query-gpu=server,index,name,memory.total,memory.free,utilization.gpu,admit --format=csv -s "$S")" = \
    "server, index, name, memory.total [MiB], memory.free [MiB], utilization.gpu [%], admit
$S, 0, rgpu fake device, 4096 MiB, 4096 MiB, 0 %, yes"
check "--format=csv,noheader,nounits" test "$("$RGPU" status --query-gpu=memory.total,memory.used \
    --format=csv,noheader,nounits -s "$S")" = "4096, 0"
"$RGPU" status --query-gpu=bogus -s "$S" >"$WORK/q.out" 2>&1
check "an unknown field is refused (exit $?)" grep -q 'field "bogus" is not a valid field' "$WORK/q.out"

# ---- one JSON schema: status, ping, the server's /status -----------------------------------------
NOLEAK env RGPU_SERVER=$S "$HOLD" 64 30 >"$WORK/hold.out" 2>&1 &
HPID=$!
PIDS+=($HPID)
wait_for "$WORK/hold.out" ready >/dev/null
ST=$("$RGPU" status -o json -s "$S")
check "status -o json: schema 1, units in names" test "$(echo "$ST" | json \
    'd["schema"],d["kind"],sorted(d["servers"][0]["gpus"][0]),d["servers"][0]["memory_quota_bytes"]>>20,"probe_rtt_us" in d["servers"][0]')" = \
    "1 status ['index', 'memory_free_bytes', 'memory_reserved_bytes', 'memory_total_bytes', 'memory_used_bytes', 'name', 'sessions', 'tenant_gpu_share', 'tenant_gpu_share_due', 'tenant_sessions', 'utilization'] 1024 True"
check "--json is -o json" test "$("$RGPU" status --json -s "$S" | json 'd["schema"]')" = 1
SS=$(http "http://127.0.0.1:$MPRIV/status" | cut -d' ' -f2-)
check "/status: schema 1, the same GPU names" test "$(echo "$SS" | json \
    'd["schema"],d["kind"],d["gpus"][0]["memory_total_bytes"]>>20,d["gpus"][0]["memory_reserved_bytes"]>>20,d["gpus"][0]["name"],d["tenants"][0]["mem_quota_bytes"]>>20,"started_unix_seconds" in d["sessions"][0]')" = \
    "1 server-status 4096 1024 rgpu fake device 1024 True"
sessions_before=$(grep -c "session [0-9]*: client" "$WORK/server.log")
PG=$("$RGPU" ping -o json -s "$S")
check "ping -o json: schema 1, rtt_us, no bandwidth by default" test "$(echo "$PG" | json \
    'd["schema"],d["kind"],d["round_trips"],d["servers"][0]["rtt_us"]["p50"]>0,d["servers"][0]["bandwidth"]')" = \
    "1 ping 10 True None"
"$RGPU" ping -s "$S" >"$WORK/ping.txt"
check "ping is light by default: it answers, with no session and no copies ($sessions_before before)" \
    test "$?:$(grep -c "session [0-9]*: client" "$WORK/server.log")" = "0:$sessions_before"
check "ping's table: round trips only" eval 'head -1 "$WORK/ping.txt" | grep -q "^SERVER *MIN *P50 *P90 *P99$"'
kill "$HPID" 2>/dev/null; wait "$HPID" 2>/dev/null

# ---- item 11: memory above the tenant's quota refused, not cut ------------------------------------
check "status --memory 2GiB (quota 1 GiB): ADMIT no, with the reason" eval '"$RGPU" status -o wide \
    --memory 2GiB -s "$S" | grep -q " no .*tenant .alpha. may reserve at most 1.00 GiB of each GPU"'
check "status --share 50% (2 GiB of 4): ADMIT no" \
    test "$("$RGPU" status --share 50% -o json -s "$S" | json 'd["servers"][0]["admit"]')" = False
check "status --share 10%: ADMIT yes" \
    test "$("$RGPU" status --share 10% -o json -s "$S" | json 'd["servers"][0]["admit"]')" = True
NOLEAK "$RGPU" run --memory 2GiB -s "$S" -- "$HOLD" 16 0 >"$WORK/over.out" 2>&1
check "rgpu run --memory 2GiB is refused with the reason (exit $?)" \
    eval 'grep -q "refused the session: not permitted: tenant .alpha. may reserve at most 1.00 GiB of each GPU (its mem_quota) and the job asked for 2.00 GiB" "$WORK/over.out" && ! grep -q PASS "$WORK/over.out"'
NOLEAK "$RGPU" run --share 0.5 -s "$S" -- "$HOLD" 16 0 >"$WORK/share.out" 2>&1
check "rgpu run --share 0.5 is refused too (exit $?)" \
    grep -q "asked for 2.00 GiB (50% of a 4.00 GiB GPU)" "$WORK/share.out"
NOLEAK "$RGPU" run --share 0.125 -s "$S" -- "$HOLD" 16 5 >"$WORK/share2.out" 2>&1 &
RUN=$!
PIDS+=($RUN)
wait_for "$WORK/share2.out" ready >/dev/null
check "rgpu run --share 0.125 gets exactly 512 MiB (in /status)" test "$(http "http://127.0.0.1:$MPRIV/status" |
    cut -d' ' -f2- | json '512 in [x["memory_quota_bytes"]>>20 for x in d["sessions"]]')" = True
wait "$RUN"
check "... and runs to the end" grep -q PASS "$WORK/share2.out"
"$RGPU" run --memory 1GiB --share 0.5 -- true 2>"$WORK/both.out"
check "--memory and --share together: refused (exit $?)" grep -q "give one" "$WORK/both.out"

# ---- item 9: metrics for a cluster without a token ------------------------------------------------
check "metrics_public_listen: /healthz is ok without a token" \
    test "$(http "http://127.0.0.1:$MPUB/healthz")" = "200 ok"
check "... /metrics without a token" eval 'http "http://127.0.0.1:$MPUB/metrics" | grep -q "^200 # HELP rgpu_tenant_sessions"'
check "... never /status (it names every tenant's peers)" test "$(http "http://127.0.0.1:$MPUB/status")" = 404
if command -v promtool >/dev/null; then
    python3 -c 'import sys,urllib.request;sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$MPUB/metrics" >"$WORK/metrics.txt"
    check "promtool check metrics: every metric has HELP and TYPE ($(promtool check metrics <"$WORK/metrics.txt" 2>&1 | head -3 | tr '\n' ' '))" \
        eval '[ -s "$WORK/metrics.txt" ] && promtool check metrics <"$WORK/metrics.txt" >/dev/null 2>&1'
else
    fail "promtool is not installed (tools/test.sh installs Debian's prometheus package)"
fi
check "every metric family has HELP and TYPE (without promtool too)" python3 - "$WORK/metrics.txt" <<'PY'
import re, sys
help_, type_, names = set(), set(), set()
for line in open(sys.argv[1]):
    m = re.match(r"# (HELP|TYPE) (\S+)", line)
    if m:
        (help_ if m.group(1) == "HELP" else type_).add(m.group(2))
    elif line.strip():
        names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
sys.exit(0 if names and names <= help_ and names <= type_ else 1)
PY
printf '[server]\nmetrics_listen = 0.0.0.0:%s\n' "$(free_port)" >"$WORK/open.conf"
"$SERVER" --config "$WORK/open.conf" --listen 127.0.0.1 --port "$(free_port)" --driver "$FAKE" \
    >"$WORK/open.log" 2>&1
check "metrics_listen off loopback without a token still refuses to start, naming the public key" \
    grep -q "metrics_public_listen = ADDR:PORT serves /metrics and /healthz" "$WORK/open.log"

[ "$FAILS" -eq 0 ] && echo "ops_e2e: all checks passed" || { echo "ops_e2e: $FAILS check(s) failed"; exit 1; }
