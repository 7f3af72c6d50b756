#!/bin/bash
# The op-table check must fail, naming the problem, on each of: an op whose handler is gone, a
# handler defined twice, a handler no op names, a client call that leaves out an argument, a
# client call with an argument its op does not have, a positional argument read in the server,
# a positional argument write in the client (call.a.words[i] = v) outside the generic forwarder,
# that forwarder (client/api/nccl_ext.c) without its run-time check against proto_ops[], a table
# whose ops share a handler with different arguments, and an op the client sends without
# waiting that the table does not flag noreply; and in the wire tests, a call that packs its
# argument words by position without a 'positional:' comment, WIRE_OP with a word placed by
# position, WIRE_OP_N naming an argument past its count, WIRE_OP_REST of an op not variable.
# Usage: drift.sh PYTHON SRC_ROOT
set -u
PY=$1 SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fails=0

# copy: a fresh copy of what the check reads (the tests' sources only where a case needs them)
copy() {
    rm -rf "$WORK/src" && mkdir -p "$WORK/src/proto" &&
        cp -r "$SRC/server" "$SRC/client" "$WORK/src/" && cp "$SRC/proto/ops.def" "$WORK/src/proto/"
}
copy_tests() {
    copy && mkdir -p "$WORK/src/tests" && cp -r "$SRC/tests/worker" "$SRC/tests/server" \
        "$SRC/tests/wire" "$WORK/src/tests/"
}
# expect NAME MESSAGE: the check fails on the copy and says MESSAGE
expect() {
    if "$PY" "$SRC/tools/gen_ops.py" --def "$WORK/src/proto/ops.def" --check "$WORK/src" \
        >"$WORK/out" 2>&1; then
        echo "FAIL ($1): the check accepted it"; fails=$((fails + 1)); return
    fi
    if ! grep -q -- "$2" "$WORK/out"; then
        echo "FAIL ($1): no '$2' in:"; cat "$WORK/out"; fails=$((fails + 1)); return
    fi
    echo "caught ($1)"
}

copy
sed -i 's/^CUresult srv_op_memset(/static CUresult memset_gone(/' "$WORK/src/server/handlers_mem.c"
expect "missing handler" "handler srv_op_memset (MEMSET) is defined 0 times"

copy
printf 'CUresult srv_op_nop(struct srv_session *s, struct srv_call *call)\n{\n    return 0;\n}\n' \
    >>"$WORK/src/server/handlers_mem.c"
expect "two handlers" "handler srv_op_nop (NOP) is defined 2 times"

copy
printf 'CUresult srv_op_orphan(struct srv_session *s, struct srv_call *call)\n{\n    return 0;\n}\n' \
    >>"$WORK/src/server/handlers_mem.c"
expect "handler without op" "srv_op_orphan is not the handler of any op"

copy
sed -i 's/CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr, .size = size)/CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr)/' \
    "$WORK/src/client/api/vmm.c"
expect "client leaves out an argument" "MEM_ADDRESS_FREE without size"

copy
sed -i 's/CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr, .size = size)/CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr, .size = size, .flags = 0)/' \
    "$WORK/src/client/api/vmm.c"
expect "client names an unknown argument" "MEM_ADDRESS_FREE has no argument"

copy
printf 'static unsigned long long peek(const struct srv_call *call)\n{\n    return call->msg->args[2];\n}\n' \
    >>"$WORK/src/server/handlers_mem.c"
expect "positional read" "positional argument read"

copy
printf 'static void poke(struct cli_call *call)\n{\n    call->a.words[1] = 7;\n}\n' \
    >>"$WORK/src/client/api/vmm.c"
expect "positional write" "client/api/vmm.c:[0-9]*: positional argument write"

copy
sed -i 's/proto_ops\[/proto_op_table[/g' "$WORK/src/client/api/nccl_ext.c"
expect "forwarder without its check" "nccl_ext.c: a generic forwarder that does not check"

copy
sed -i 's/^\(STREAM_QUERY .*| \)stream\( *|\)/\1strm  \2/' "$WORK/src/proto/ops.def"
expect "shared handler, different arguments" "STREAM_QUERY shares srv_op_stream_sync_query"

copy
sed -i 's/^\(EVENT_RECORD .*| \)noreply stream/\1stream        /' "$WORK/src/proto/ops.def"
expect "async op without noreply" "EVENT_RECORD is sent without waiting but is not flagged noreply"

copy_tests
printf 'static void raw(struct peer *p)\n{\n    uint64_t d = 1;\n    call_result(p, PROTO_OP_MEM_FREE, &d, 1, NULL, 0);\n}\n' \
    >>"$WORK/src/tests/worker/test_worker.c"
expect "test packs words by position" "test_worker.c:[0-9]*: call_result() sends 'PROTO_OP_MEM_FREE' with argument words by position"

copy_tests
sed -i 's/WIRE_OP(MEM_FREE, .dptr = d)/WIRE_OP(MEM_FREE, d)/' "$WORK/src/tests/server/test_server.c"
expect "WIRE_OP with a word by position" "WIRE_OP(MEM_FREE): 'd' is not \`.name = value\`"

copy_tests
sed -i 's/WIRE_OP_N(MODULE_LOAD, 1, .id = MOD_ID)/WIRE_OP_N(MODULE_LOAD, 1, .id = MOD_ID, .image_len = 9)/' \
    "$WORK/src/tests/server/test_server.c"
expect "WIRE_OP_N names past its count" "WIRE_OP_N(MODULE_LOAD, 1) names image_len"

copy_tests
sed -i 's/WIRE_OP_REST(MODULE_LOAD_JIT,/WIRE_OP_REST(LINK_CREATE,/' "$WORK/src/tests/worker/test_worker.c"
expect "WIRE_OP_REST of a fixed op" "WIRE_OP_REST of LINK_CREATE"

[ $fails -eq 0 ] && echo "drift caught: PASS" || exit 1
