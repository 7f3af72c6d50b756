/* What the client knows about addresses: device allocations it made (to answer pointer
 * attributes and to tell device from host pointers in cuMemcpy) and pinned host memory (which
 * lets DtoH copies complete asynchronously). A sorted array per kind, searched by bisection. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client/objects/address_ranges.h"

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_range *ranges[2];
static size_t nranges[2], caps[2];
static uint64_t next_buffer_id = 1;

/* Index of the first range whose base is > addr. */
static size_t upper_bound(enum mem_kind kind, uintptr_t addr)
{
    size_t lo = 0, hi = nranges[kind];

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[kind][mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool addr_range_add(enum mem_kind kind, uintptr_t base, size_t size, struct cli_ctx *ctx,
                    unsigned flags)
{
    size_t i;
    bool ok = true;

    pthread_mutex_lock(&map_lock);
    if (nranges[kind] == caps[kind]) {
        size_t cap = caps[kind] ? caps[kind] * 2 : 64;
        struct mem_range *r = realloc(ranges[kind], cap * sizeof(*r));
        if (r == NULL) {
            ok = false;
            goto out;
        }
        ranges[kind] = r;
        caps[kind] = cap;
    }
    i = upper_bound(kind, base);
    memmove(&ranges[kind][i + 1], &ranges[kind][i], (nranges[kind] - i) * sizeof(**ranges));
    ranges[kind][i] = (struct mem_range){base, size, ctx, flags, next_buffer_id++, NULL};
    nranges[kind]++;
out:
    pthread_mutex_unlock(&map_lock);
    return ok;
}

static bool find_locked(enum mem_kind kind, uintptr_t addr, size_t *index_p)
{
    size_t i = upper_bound(kind, addr);

    if (i == 0)
        return false;
    i--;
    if (addr - ranges[kind][i].base >= (ranges[kind][i].size ? ranges[kind][i].size : 1))
        return false;
    *index_p = i;
    return true;
}

bool addr_range_find(enum mem_kind kind, uintptr_t addr, struct mem_range *range_p)
{
    size_t i;
    bool found;

    pthread_mutex_lock(&map_lock);
    found = find_locked(kind, addr, &i);
    if (found)
        *range_p = ranges[kind][i];
    pthread_mutex_unlock(&map_lock);
    return found;
}

bool addr_range_overlaps(enum mem_kind kind, uintptr_t base, size_t size)
{
    size_t i;
    bool overlaps;

    pthread_mutex_lock(&map_lock);
    i = upper_bound(kind, base + (size ? size : 1) - 1);
    overlaps = i > 0 && ranges[kind][i - 1].base + ranges[kind][i - 1].size > base;
    pthread_mutex_unlock(&map_lock);
    return overlaps;
}

bool addr_range_attach_mr(enum mem_kind kind, uintptr_t base, void *mr, void **mr_p)
{
    size_t i;
    bool found;

    pthread_mutex_lock(&map_lock);
    found = find_locked(kind, base, &i) && ranges[kind][i].base == base;
    if (found) {
        if (ranges[kind][i].mr == NULL)
            ranges[kind][i].mr = mr;
        *mr_p = ranges[kind][i].mr;
    }
    pthread_mutex_unlock(&map_lock);
    return found;
}

bool addr_range_remove(enum mem_kind kind, uintptr_t base, struct mem_range *range_p)
{
    size_t i;
    bool found;

    pthread_mutex_lock(&map_lock);
    found = find_locked(kind, base, &i) && ranges[kind][i].base == base;
    if (found) {
        if (range_p != NULL)
            *range_p = ranges[kind][i];
        memmove(&ranges[kind][i], &ranges[kind][i + 1], (nranges[kind] - i - 1) * sizeof(**ranges));
        nranges[kind]--;
    }
    pthread_mutex_unlock(&map_lock);
    return found;
}

/* Drop the device ranges of a context that is going (context teardown hook). */
static void forget_ctx(struct cli_ctx *ctx)
{
    pthread_mutex_lock(&map_lock);
    for (int kind = 0; kind < 2; kind++) {
        size_t j = 0;
        for (size_t i = 0; i < nranges[kind]; i++)
            if (ranges[kind][i].ctx != ctx || kind == MEM_HOST)
                ranges[kind][j++] = ranges[kind][i];
        nranges[kind] = j;
    }
    pthread_mutex_unlock(&map_lock);
}

bool cli_host_pinned(const void *p, size_t len)
{
    struct mem_range r;

    return addr_range_find(MEM_HOST, (uintptr_t)p, &r) && (uintptr_t)p + len <= r.base + r.size;
}

bool cli_dev_lookup(CUdeviceptr dptr, CUdeviceptr *base_p, size_t *size_p)
{
    struct mem_range r;

    if (!addr_range_find(MEM_DEVICE, (uintptr_t)dptr, &r))
        return false;
    if (base_p != NULL)
        *base_p = r.base;
    if (size_p != NULL)
        *size_p = r.size;
    return true;
}

__attribute__((constructor)) static void address_ranges_hooks(void)
{
    cli_ctx_on_teardown(forget_ctx);
}
