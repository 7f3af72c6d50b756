/* The cost of packing one launch's Call (the client, every call) and of decoding it (the
 * worker, every call): protobuf-c against proto/call_pack.c and proto/call_unpack.c, in one
 * run (no GPU needed). Prints JSON lines like bench/micro.c. Usage: rgpu-bench-pack */
#include <stdio.h>
#include <time.h>

#include "proto/arena.h"
#include "proto/frame.h"
#include "proto/ops.h"

#define N 2000000

static void report(const char *name, double theirs, double ours)
{
    printf("{\"bench\": \"%s_protobuf_c\", \"value\": %.1f, \"unit\": \"ns\"}\n", name, theirs);
    printf("{\"bench\": \"%s_rgpu\", \"value\": %.1f, \"unit\": \"ns\"}\n", name, ours);
    printf("{\"bench\": \"%s_ratio\", \"value\": %.3f, \"unit\": \"x\"}\n", name, ours / theirs);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* As the worker decodes: protobuf-c into its arena (then freed and reset), or by hand. */
static int unpack(const Rgpu__Call *m, const uint8_t *buf, size_t len)
{
    struct proto_arena arena;
    uint64_t args[64], sum = 0;
    Rgpu__Call view, *u;
    double t, theirs;

    if (proto_arena_init(&arena, 64u << 10) != RG_OK)
        return 1;
    t = now_ns();
    for (int i = 0; i < N; i++) {
        u = rgpu__call__unpack(&arena.allocator, len, buf);
        sum += u->n_args;
        rgpu__call__free_unpacked(u, &arena.allocator);
        proto_arena_reset(&arena);
    }
    theirs = (now_ns() - t) / N;
    t = now_ns();
    for (int i = 0; i < N; i++)
        sum += proto_call_unpack(buf, len, &view, args, 64) ? view.n_args : 0;
    report("call_decode", theirs, (now_ns() - t) / N);
    proto_arena_destroy(&arena);
    return sum != 2u * N * m->n_args;
}

int main(void)
{
    /* As client/api/launch.c sends an empty-grid launch with three parameters (24 bytes). */
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
    report("call_pack", theirs, ours);
    return unpack(&m, out, proto_call_pack(&m, out)) + (sum == 0);
}
