#include "proto/arena.h"

#include <stdlib.h>

static void *arena_alloc(void *data, size_t size)
{
    struct proto_arena *a = data;
    size_t need = (size + 15) & ~(size_t)15;

    if (a->cap - a->used >= need) {
        void *p = a->buf + a->used;
        a->used += need;
        return p;
    }
    return malloc(size);
}

static void arena_free(void *data, void *p)
{
    struct proto_arena *a = data;

    if ((uint8_t *)p < a->buf || (uint8_t *)p >= a->buf + a->cap)
        free(p);
}

rg_status_t proto_arena_init(struct proto_arena *arena, size_t cap)
{
    arena->buf = aligned_alloc(16, (cap + 15) & ~(size_t)15);
    if (arena->buf == NULL)
        return RG_ERR_NOMEM;
    arena->cap = cap;
    arena->used = 0;
    arena->allocator = (ProtobufCAllocator){arena_alloc, arena_free, arena};
    return RG_OK;
}

void proto_arena_reset(struct proto_arena *arena)
{
    arena->used = 0;
}

void proto_arena_destroy(struct proto_arena *arena)
{
    free(arena->buf);
    arena->buf = NULL;
}
