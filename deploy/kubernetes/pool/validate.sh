#!/bin/bash
# deploy/kubernetes/pool/ checked offline (docs/pool.md, "Kubernetes"), apart from
# tools/k8s_validate.sh (the other manifests): every document against the Kubernetes schemas of
# kubernetes-models 5.1.0 (the first with resource.k8s.io/v1, Dynamic Resource Allocation; ES
# modules only, hence validate_schemas.mjs beside tools/k8s_validate.js), installed once into
# BUILD_DIR/k8s-validator-pool; the references (check_dra.js: DRA classes, templates and claims,
# ConfigMaps, Secrets and ServiceAccounts the pods use); and resourceslice.py on what
# `rgpu status --json` says of two gpu-servers on the fake driver, its slice validated the same
# way; the DRA node plugin (rgpu_dra_plugin.py, its stubs generated from proto/ here) against a
# kubelet and an API server played by test_nodeplugin.py. No cluster is run: what the scheduler
# and the kubelet do with the slice and the plugin is not tested here.
# Usage: deploy/kubernetes/pool/validate.sh BUILD_DIR
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../../.." && pwd)
BUILD=$(cd "$1" && pwd)
MODULES=$BUILD/k8s-validator-pool
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
FAILS=0

if [ ! -f "$MODULES/node_modules/kubernetes-models/resource.k8s.io/v1/index.js" ]; then
    mkdir -p "$MODULES"
    npm install --prefix "$MODULES" --no-audit --no-fund --no-save \
        kubernetes-models@5.1.0 js-yaml@4.1.0 >"$WORK/npm.log" 2>&1 ||
        { cat "$WORK/npm.log"; echo "FAIL: npm install of the validator"; exit 1; }
fi
export NODE_PATH=$MODULES/node_modules
node "$DIR/validate_schemas.mjs" "$MODULES/node_modules" "$DIR"/*.yaml || FAILS=$((FAILS + 1))
# namespace.yaml: the namespace rgpu the publisher lives in
node "$DIR/check_dra.js" "$ROOT/deploy/kubernetes/namespace.yaml" "$DIR"/*.yaml || FAILS=$((FAILS + 1))

# The publisher's slice for two gpu-servers of one GPU each (10 GiB, the fake driver).
SERVER=$BUILD/bin/gpu-server
printf '[tenant pool-publisher]\ntoken = pub-secret\n' >"$WORK/server.conf"
POOL=""
for i in 1 2; do
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    FAKECUDA_MEM_MB=10240 "$SERVER" --config "$WORK/server.conf" --listen 127.0.0.1 --port "$port" \
        --driver "$BUILD/tests/fakecuda/libfakecuda.so" >"$WORK/server-$i.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do grep -qs "listening on" "$WORK/server-$i.log" && break; sleep 0.1; done
    POOL="$POOL${POOL:+,}127.0.0.1:$port"
done
env -u RGPU_SERVER -u RGPU_CONFIG HOME="$WORK" RGPU_POOL="$POOL,127.0.0.1:1" RGPU_TENANT=pool-publisher \
    RGPU_TOKEN=pub-secret "$BUILD/bin/rgpu" status --json >"$WORK/status.json"
python3 "$DIR/resourceslice.py" 42 <"$WORK/status.json" >"$WORK/slice.yaml" || FAILS=$((FAILS + 1))
cp "$DIR/deviceclass.yaml" "$WORK/"
node "$DIR/validate_schemas.mjs" "$MODULES/node_modules" "$WORK/slice.yaml" || FAILS=$((FAILS + 1))
node "$DIR/check_dra.js" "$WORK/deviceclass.yaml" "$WORK/slice.yaml" || FAILS=$((FAILS + 1))
got=$(python3 -c 'import json,sys;s=json.load(open(sys.argv[1]))["spec"];d=s["devices"];print(len(d),s["pool"]["generation"],d[0]["capacity"]["memory"]["value"],d[0]["attributes"]["server"]["string"] in sys.argv[2])' "$WORK/slice.yaml" "$POOL")
if [ "$got" = "2 42 10737418240 True" ]; then
    echo "ok   resourceslice.py: the two servers that answered are two 10 GiB devices (the dead one left out)"
else
    echo "FAIL resourceslice.py on rgpu status --json: $got"; cat "$WORK/slice.yaml"; FAILS=$((FAILS + 1))
fi

# The node plugin: python3 with Debian's python3-grpcio and python3-grpc-tools (tools/test.sh);
# /usr/bin/python3 where another python3 (a pyenv) comes first on PATH without them.
PY=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import grpc, grpc_tools' 2>/dev/null && { PY=$p; break; }
done
if [ -z "$PY" ]; then
    echo "FAIL node plugin: no python3 with grpc and grpc_tools (python3-grpcio, python3-grpc-tools)"
    FAILS=$((FAILS + 1))
elif ! "$PY" -m grpc_tools.protoc -I "$DIR/proto" --python_out="$WORK" --grpc_python_out="$WORK" \
        "$DIR"/proto/*.proto; then
    echo "FAIL node plugin: generating the stubs from proto/"; FAILS=$((FAILS + 1))
else
    "$PY" "$DIR/test_nodeplugin.py" "$WORK" || FAILS=$((FAILS + 1))
fi
echo "$FAILS failed"
[ "$FAILS" -eq 0 ]
