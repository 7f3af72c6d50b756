#!/bin/bash
# deploy/kubernetes/ checked offline, and its DaemonSet started as shipped:
#   1. the Kubernetes schemas (npm kubernetes-models, pinned, installed once into
#      BUILD_DIR/k8s-validator), references between the manifests, GPUs through the device
#      plugin (tools/k8s_validate.js), for what `kubectl apply -f deploy/kubernetes/` applies and
#      for the examples beside it;
#   2. nothing but the server side in what that command applies (the example Job, with its
#      placeholder token, lives in deploy/kubernetes/examples/);
#   3. the DaemonSet's pod run as the kubelet would, with the built gpu-server on the fake
#      driver (tools/k8s_validate.py): its ConfigMap and Secret mounted, its command and args as
#      written, no flag added; its readiness and liveness probes, and Prometheus' scrape of
#      the annotated port checked with promtool. In fresh mount, network and PID namespaces,
#      so the manifest's own ports are used whatever else runs on this machine.
# Usage: tools/k8s_validate.sh BUILD_DIR     (root)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$1" && pwd)
MODULES=$BUILD/k8s-validator
WORK=$(mktemp -d)
FAILS=0
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

if [ ! -f "$MODULES/node_modules/kubernetes-models/package.json" ]; then
    mkdir -p "$MODULES"
    npm install --prefix "$MODULES" --no-audit --no-fund --no-save \
        kubernetes-models@4.5.1 js-yaml@4.1.0 >"$WORK/npm.log" 2>&1 ||
        { cat "$WORK/npm.log"; echo "FAIL: npm install of the validator"; exit 1; }
fi
NODE_PATH=$MODULES/node_modules node "$ROOT/tools/k8s_validate.js" --extract "$WORK/data" \
    "$ROOT"/deploy/kubernetes/*.yaml "$ROOT"/deploy/kubernetes/examples/*.yaml || exit 1

# 2. What `kubectl apply -f deploy/kubernetes/` applies (not recursive: the top level).
APPLIED=$(grep -h '^kind:' "$ROOT"/deploy/kubernetes/*.yaml | awk '{print $2}' | sort | tr '\n' ' ')
if [ "$APPLIED" = "ConfigMap DaemonSet Namespace Secret Service " ]; then
    echo "ok   kubectl apply -f deploy/kubernetes/ applies the server side alone: $APPLIED"
else
    echo "FAIL kubectl apply -f deploy/kubernetes/ applies: $APPLIED"
    FAILS=$((FAILS + 1))
fi

# 3. The DaemonSet's pod, as shipped.
if [ "$(id -u)" -ne 0 ]; then
    echo "k8s_validate: running the DaemonSet's pod needs root (namespaces, chroot); skipped"
    exit $((FAILS > 0))
fi
unshare --mount --net --pid --fork --mount-proc --propagation private \
    python3 "$ROOT/tools/k8s_validate.py" "$WORK/data" "$WORK/data/pods/DaemonSet-gpu-server.json" \
    "$BUILD" || FAILS=$((FAILS + 1))
[ "$FAILS" -eq 0 ] && echo "k8s: all checks passed" || { echo "k8s: $FAILS check(s) failed"; exit 1; }
