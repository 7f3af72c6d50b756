/* The cost of packing one launch's Call frame: protobuf-c's descriptor walk against
 * proto/call_pack.c, in one run (no GPU needed). Prints JSON lines like bench/micro.c.
 * Usage: rgpu-bench-pack */
#include <stdio.h>
#include <time.h>

#include "proto/frame.h"
#include "proto/ops.h"

#define N 2000000

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void)
{
    /* As client/launch.c sends an empty-grid launch with three parameters (24 bytes). */
    uint64_t args[11] = {0x1230, 1, 1, 1, 128, 1, 1, 0, 0x5671, 24, 0};
    static uint8_t params[24], out[4096];
    Rgpu__Call m = RGPU__CALL__INIT;
    double t, ours, theirs;
    size_t sum = 0;

    m.op = PROTO_OP_LAUNCH, m.ctx = 0x10, m.n_args = 11, m.args = args;
    m.data = (ProtobufCBinaryData){sizeof(params), params};
    t = now_ns();
    for (m.id = 1; m.id <= N; m.id++)
        sum += protobuf_c_message_get_packed_size(&m.base) + protobuf_c_message_pack(&m.base, out);
    theirs = (now_ns() - t) / N;
    t = now_ns();
    for (m.id = 1; m.id <= N; m.id++)
        sum += proto_call_packed_size(&m) + proto_call_pack(&m, out);
    ours = (now_ns() - t) / N;
    printf("{\"bench\": \"call_pack_protobuf_c\", \"value\": %.1f, \"unit\": \"ns\"}\n", theirs);
    printf("{\"bench\": \"call_pack_rgpu\", \"value\": %.1f, \"unit\": \"ns\"}\n", ours);
    printf("{\"bench\": \"call_pack_ratio\", \"value\": %.3f, \"unit\": \"x\"}\n", ours / theirs);
    return sum == 0;
}
