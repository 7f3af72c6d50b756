/* A bump allocator for protobuf-c, so unpacking a message on the hot path does not touch the
 * heap: allocations come from one buffer that is reset after each message; ones that do not fit
 * fall back to malloc (and are freed by protobuf-c's free_unpacked as usual). */
#ifndef RGPU_PROTO_ARENA_H
#define RGPU_PROTO_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

struct proto_arena {
    ProtobufCAllocator allocator; /* pass &arena->allocator to *_unpack / *_free_unpacked */
    uint8_t *buf;
    size_t cap, used;
};

rg_status_t proto_arena_init(struct proto_arena *arena, size_t cap);
/* Forget every allocation (call after free_unpacked). */
void proto_arena_reset(struct proto_arena *arena);
void proto_arena_destroy(struct proto_arena *arena);

#endif
