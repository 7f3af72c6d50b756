#!/bin/bash
# The layer check must fail, naming the file and line, on each of: a session file that includes
# an objects header, an objects file that includes an entry point's header, a bulk file that
# reaches an entry point's header by a relative path, a file in no layer folder, the session's
# private header included outside the session, and a part outside client/ (the NVML shim) that
# includes a header of the client's layers.
# Usage: drift.sh PYTHON SRC_ROOT
set -u
PY=$1 SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fails=0

# copy: a fresh copy of what the check reads
copy() {
    rm -rf "$WORK/src" && mkdir -p "$WORK/src" && cp -r "$SRC/client" "$SRC/nvml" "$WORK/src/"
}
# include FILE HEADER: add `#include "HEADER"` after FILE's first include
include() {
    sed -i "0,/^#include/s||#include \"$2\"\n#include|" "$WORK/src/$1"
}
# expect NAME MESSAGE: the check fails on the copy and says MESSAGE
expect() {
    if "$PY" "$SRC/tools/check_layers.py" "$WORK/src" >"$WORK/out" 2>&1; then
        echo "FAIL ($1): the check accepted it"; fails=$((fails + 1)); return
    fi
    if ! grep -q -- "$2" "$WORK/out"; then
        echo "FAIL ($1): no '$2' in:"; cat "$WORK/out"; fails=$((fails + 1)); return
    fi
    echo "caught ($1)"
}

copy
if ! "$PY" "$SRC/tools/check_layers.py" "$WORK/src" >"$WORK/out" 2>&1; then
    echo "FAIL: the unchanged copy does not pass:"; cat "$WORK/out"; exit 1
fi

copy
include client/session/call_stream.c client/objects/objects.h
expect "session includes objects" \
    "client/session/call_stream.c:[0-9]*: session/ includes client/objects/objects.h of the higher layer objects/"

copy
include client/objects/call.c client/api/api.h
expect "objects includes api" "client/objects/call.c:[0-9]*: objects/ includes client/api/api.h"

copy
include client/bulk/lanes.c ../api/graph.h
expect "bulk includes api by a relative path" "client/bulk/lanes.c:[0-9]*: bulk/ includes client/api/graph.h"

copy
printf '#include "client/api/api.h"\n' >"$WORK/src/client/stray.c"
expect "file in no layer" "client/stray.c: in no layer folder"

copy
include client/objects/handle.c client/session/session.h
expect "private header" "client/objects/handle.c:[0-9]*: includes client/session/session.h, private to session/"

copy
include nvml/nvml_init.c client/objects/objects.h
expect "outside part includes a layer" "nvml/nvml_init.c:[0-9]*: includes client/objects/objects.h"

[ $fails -eq 0 ] && echo "drift caught: PASS" || exit 1
