/* Fuzz target: the hand-written Call decoder (proto/call_unpack.c) against protobuf-c's. When
 * proto_call_unpack accepts bytes, protobuf-c must decode them to the same Call, and packing
 * that Call by hand must give the same length back. */
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Rgpu__Call m = RGPU__CALL__INIT, *ref;
    uint64_t args[64];

    ref = rgpu__call__unpack(NULL, size, data);
    if (proto_call_unpack(data, size, &m, args, 64)) {
        if (ref == NULL || ref->id != m.id || ref->op != m.op || ref->ctx != m.ctx ||
            ref->n_args != m.n_args ||
            (m.n_args && memcmp(ref->args, m.args, m.n_args * sizeof(*m.args)) != 0) ||
            ref->data.len != m.data.len ||
            (m.data.len && memcmp(ref->data.data, m.data.data, m.data.len) != 0))
            abort(); /* the two decoders disagree */
        uint8_t *out = malloc(proto_call_packed_size(&m) + 1);
        if (out == NULL || proto_call_pack(&m, out) != proto_call_packed_size(&m) ||
            proto_call_packed_size(&m) != rgpu__call__get_packed_size(ref))
            abort();
        free(out);
    }
    if (ref != NULL)
        rgpu__call__free_unpacked(ref, NULL);
    return 0;
}
