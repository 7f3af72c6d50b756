#!/bin/bash
# deploy/kubernetes/ checked offline: the Kubernetes schemas (npm kubernetes-models, pinned,
# installed once into BUILD_DIR/k8s-validator), references between the manifests, and the
# gpu-server config the DaemonSet assembles from its ConfigMap and Secret, loaded by the built
# gpu-server on the fake driver with no warning about it.
# Usage: tools/k8s_validate.sh BUILD_DIR
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$1" && pwd)
MODULES=$BUILD/k8s-validator
WORK=$(mktemp -d)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

if [ ! -f "$MODULES/node_modules/kubernetes-models/package.json" ]; then
    mkdir -p "$MODULES"
    npm install --prefix "$MODULES" --no-audit --no-fund --no-save \
        kubernetes-models@4.5.1 js-yaml@4.1.0 >"$WORK/npm.log" 2>&1 ||
        { cat "$WORK/npm.log"; echo "FAIL: npm install of the validator"; exit 1; }
fi
NODE_PATH=$MODULES/node_modules node "$ROOT/tools/k8s_validate.js" --extract "$WORK/data" \
    "$ROOT"/deploy/kubernetes/*.yaml || exit 1

# The config as the DaemonSet's container assembles it, read by gpu-server itself.
cat "$WORK/data/rgpu-server-config/server.conf" "$WORK/data/rgpu-server-tokens/tokens.conf" \
    >"$WORK/server.conf"
sed -i 's|^module_cache = .*|module_cache = off|' "$WORK/server.conf"
"$BUILD/bin/gpu-server" --config "$WORK/server.conf" --listen 127.0.0.1 --port 0 \
    --metrics-listen 127.0.0.1:0 --driver "$BUILD/tests/fakecuda/libfakecuda.so" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 50); do grep -qs "listening on" "$WORK/server.log" && break; sleep 0.1; done
if ! grep -q "listening on" "$WORK/server.log" || grep -qiE "warn|error" "$WORK/server.log"; then
    echo "FAIL: gpu-server on the manifests' config:"; cat "$WORK/server.log"; exit 1
fi
TENANTS=$(kill -HUP "$SERVER_PID"; sleep 0.5; grep -o "reloaded .*: [0-9]* tenant(s)" "$WORK/server.log")
case "$TENANTS" in
    *": 2 tenant(s)") echo "ok   gpu-server reads the DaemonSet's config: $TENANTS" ;;
    *) echo "FAIL: tenants in the DaemonSet's config: $TENANTS"; cat "$WORK/server.log"; exit 1 ;;
esac
