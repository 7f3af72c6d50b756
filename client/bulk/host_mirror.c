/* Pinned host memory mirrored on the worker (host_mirror.h says what and when; the worker's side
 * is server/handlers_host_mirror.c). One table of mirrors, by (pinned range, session), under one
 * lock that only GPU work naming pinned host memory, and synchronizations while a mirror is
 * DIRTY, ever take. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client/bulk/bulk.h"
#include "client/bulk/host_mirror.h"
#include "client/objects/address_ranges.h"
#include "common/log.h"
#include "common/map_at.h"

#define MIRRORS_MAX 256 /* as the worker's SRV_MAX_HOST_MIRRORS */

enum mirror_state { MIRROR_CLEAN, MIRROR_DIRTY, MIRROR_FAILED };

struct mirror {
    uintptr_t base; /* the pinned range, as the client knows it */
    size_t size;
    struct cli_session *sess;
    uint64_t ctx; /* the context it was last used in: where its calls go */
    enum mirror_state state;
};

uintptr_t cli_mirror_lo, cli_mirror_hi;
uint64_t cli_mirror_filter[(1u << CLI_MIRROR_FILTER_BITS) / 64];
static unsigned cli_mirror_ndirty; /* mirrored ranges DIRTY now */
static unsigned nmirrors;          /* atomic reads outside the lock */
static struct mirror mirrors[MIRRORS_MAX];
static pthread_mutex_t mirror_lock = PTHREAD_MUTEX_INITIALIZER;

/* Pinned allocations from [32 TiB, 48 TiB): above where an ASan runtime keeps its shadow, below
 * the top-down area of libraries, heaps and the CUDA driver's reservations in both processes.
 * Each allocation starts on its own 2 MiB boundary (pages never shared between two ranges). */
#define HOST_REGION_BASE ((uintptr_t)32 << 40)
#define HOST_REGION_END  ((uintptr_t)48 << 40)
#define HOST_STEP        ((uintptr_t)2 << 20)
#define HOST_TRIES       8
static uintptr_t host_next = HOST_REGION_BASE;

void *cli_mirror_host_alloc(size_t size, bool *mapped_p)
{
    size_t len = (size + 4095) & ~(size_t)4095, span = (len + HOST_STEP - 1) & ~(HOST_STEP - 1);
    void *p;

    for (int i = 0; i < HOST_TRIES && size <= HOST_REGION_END - HOST_REGION_BASE; i++) {
        uintptr_t at = __atomic_fetch_add(&host_next, span, __ATOMIC_RELAXED);
        if (at + span > HOST_REGION_END || at + span < at)
            break;
        if (rg_map_at(at, len)) {
            *mapped_p = true;
            return (void *)at;
        }
    }
    *mapped_p = false;
    return posix_memalign(&p, 4096, size) == 0 ? p : NULL;
}

void cli_mirror_host_free(void *p, size_t size, bool mapped)
{
    if (mapped)
        munmap(p, (size + 4095) & ~(size_t)4095);
    else
        free(p);
}

void cli_mirror_host_added(uintptr_t base, size_t size)
{
    uintptr_t lo = __atomic_load_n(&cli_mirror_lo, __ATOMIC_RELAXED);
    uintptr_t hi = __atomic_load_n(&cli_mirror_hi, __ATOMIC_RELAXED);

    for (uintptr_t r = base >> CLI_MIRROR_REGION_SHIFT;
         r <= (base + size - 1) >> CLI_MIRROR_REGION_SHIFT; r++) {
        unsigned bit = cli_mirror_filter_bit(r << CLI_MIRROR_REGION_SHIFT);
        __atomic_or_fetch(&cli_mirror_filter[bit / 64], 1ull << (bit % 64), __ATOMIC_RELAXED);
    }
    while ((lo == 0 || base < lo) &&
           !__atomic_compare_exchange_n(&cli_mirror_lo, &lo, base, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    while (base + size > hi && !__atomic_compare_exchange_n(&cli_mirror_hi, &hi, base + size, true,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static bool same_session(const struct cli_session *a, const struct cli_session *b)
{
    return a == b || (cli_session_is_first(a) && cli_session_is_first(b));
}

static struct mirror *mirror_of(uintptr_t base, const struct cli_session *sess)
{
    for (unsigned i = 0; i < nmirrors; i++)
        if (mirrors[i].base == base && same_session(mirrors[i].sess, sess))
            return &mirrors[i];
    return NULL;
}

static void dirty_add(int n)
{
    __atomic_add_fetch(&cli_mirror_ndirty, (unsigned)n, __ATOMIC_RELEASE);
}

/* A new mirror of r in ctx's session: mapped on the worker (CLEAN) or not (FAILED, kept so
 * that it is not asked again). NULL when the table is full. */
static struct mirror *mirror_map(const struct mem_range *r, struct cli_ctx *ctx)
{
    struct cli_call call = {CLI_ARGS(HOST_MIRROR_MAP, .addr = r->base, .size = r->size)};
    struct mirror *m;
    CUresult res;

    if (nmirrors == MIRRORS_MAX) {
        static bool said;
        if (!said)
            rg_warn("pinned host memory: %d ranges mirrored on the server already; GPU work on "
                    "more fails as without mirroring",
                    MIRRORS_MAX);
        said = true;
        return NULL;
    }
    cli_call_in(&call, ctx);
    res = cli_call_sync(&call);
    m = &mirrors[nmirrors];
    *m = (struct mirror){r->base, r->size, ctx->sess, ctx->h.id,
                         res == CUDA_SUCCESS ? MIRROR_CLEAN : MIRROR_FAILED};
    __atomic_store_n(&nmirrors, nmirrors + 1, __ATOMIC_RELEASE);
    if (res != CUDA_SUCCESS)
        rg_info("pinned host memory [%#lx, +%zu) not mirrored on %s (error %d): GPU work that "
                "uses it fails as it would without mirroring",
                (unsigned long)r->base, r->size, cli_session_server(ctx->sess), (int)res);
    return m;
}

/* The client's bytes go to the mirror, in order before the op that needs them. */
static bool mirror_push(struct mirror *m)
{
    struct cli_call call = {CLI_ARGS(HOST_MIRROR_PUSH, .addr = m->base, .size = m->size),
                            .data = (const void *)m->base, .data_len = m->size};

    call.ctx = m->ctx;
    call.sess = m->sess;
    if (cli_call_async(&call) != CUDA_SUCCESS)
        return false;
    m->state = MIRROR_DIRTY;
    dirty_add(1);
    return true;
}

bool cli_mirror_use(uintptr_t addr)
{
    struct cli_ctx *ctx = cli_ctx_current();
    struct mem_range r;
    struct mirror *m;
    bool ok;

    if (ctx == NULL || !addr_range_find(MEM_HOST, addr, &r))
        return false;
    pthread_mutex_lock(&mirror_lock);
    if ((m = mirror_of(r.base, ctx->sess)) == NULL)
        m = mirror_map(&r, ctx);
    ok = m != NULL && m->state != MIRROR_FAILED;
    if (ok)
        m->ctx = ctx->h.id;
    if (ok && m->state == MIRROR_CLEAN)
        ok = mirror_push(m);
    pthread_mutex_unlock(&mirror_lock);
    return ok;
}

void cli_mirror_launch_slow(const uint8_t *params, size_t len)
{
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t w;
        memcpy(&w, params + off, 8);
        if (cli_mirror_may_hold((uintptr_t)w))
            cli_mirror_use((uintptr_t)w);
    }
}

bool cli_mirror_holds(uintptr_t addr, size_t len, bool dirty_only)
{
    struct cli_ctx *ctx;
    bool held = false;

    if (__atomic_load_n(&nmirrors, __ATOMIC_ACQUIRE) == 0 || !cli_mirror_may_hold(addr) ||
        (dirty_only && __atomic_load_n(&cli_mirror_ndirty, __ATOMIC_ACQUIRE) == 0) ||
        (ctx = cli_ctx_current()) == NULL)
        return false;
    pthread_mutex_lock(&mirror_lock);
    for (unsigned i = 0; i < nmirrors && !held; i++) {
        const struct mirror *m = &mirrors[i];
        held = addr >= m->base && addr - m->base < m->size && len <= m->size - (addr - m->base) &&
               same_session(m->sess, ctx->sess) &&
               (m->state == MIRROR_DIRTY || (!dirty_only && m->state == MIRROR_CLEAN));
    }
    pthread_mutex_unlock(&mirror_lock);
    return held;
}

/* Copy what the worker's records say the GPU wrote into the pinned ranges (only inside them:
 * the worker mirrors whole pages). */
static void apply_records(const uint8_t *p, size_t len, struct mirror **pulled, unsigned n)
{
    uint64_t hdr[2];

    while (len >= sizeof(hdr)) {
        memcpy(hdr, p, sizeof(hdr));
        p += sizeof(hdr), len -= sizeof(hdr);
        if (hdr[1] > len)
            break;
        for (unsigned i = 0; i < n; i++) {
            uintptr_t lo = pulled[i]->base, hi = lo + pulled[i]->size;
            uintptr_t a = hdr[0] > lo ? hdr[0] : lo,
                      b = hdr[0] + hdr[1] < hi ? hdr[0] + hdr[1] : hi;
            if (a < b)
                memcpy((void *)a, p + (a - hdr[0]), b - a);
        }
        p += hdr[1], len -= hdr[1];
    }
}

/* Read back the DIRTY ranges of sess, which become CLEAN. */
static void mirrors_pull(struct cli_session *sess)
{
    struct mirror *pulled[MIRRORS_MAX];
    uint64_t addrs[MIRRORS_MAX];
    struct cli_call call = {CLI_ARGS(HOST_MIRROR_PULL)};
    size_t cap = 4096;
    unsigned n = 0;

    pthread_mutex_lock(&mirror_lock);
    for (unsigned i = 0; i < nmirrors; i++)
        if (mirrors[i].state == MIRROR_DIRTY && same_session(mirrors[i].sess, sess)) {
            pulled[n] = &mirrors[i];
            addrs[n++] = mirrors[i].base;
            cap += mirrors[i].size + mirrors[i].size / 2 + 8192; /* page-rounded, with records */
        }
    if (n == 0 || (call.rdata = malloc(cap)) == NULL)
        goto out;
    call.a.HOST_MIRROR_PULL.n = n;
    call.data = addrs;
    call.data_len = 8 * n;
    call.rdata_cap = cap;
    call.ctx = pulled[0]->ctx;
    call.sess = pulled[0]->sess;
    if (cli_call_sync(&call) == CUDA_SUCCESS) { /* else they stay DIRTY: asked again later */
        apply_records(call.rdata, call.rdata_len, pulled, n);
        for (unsigned i = 0; i < n; i++)
            pulled[i]->state = MIRROR_CLEAN;
        dirty_add(-(int)n);
    }
    free(call.rdata);
out:
    pthread_mutex_unlock(&mirror_lock);
}

/* A synchronizing op's reply came (post-reply hook): when it succeeded, the GPU work before it
 * is done, so what it wrote into the mirrors of that session is read back. Nothing to read back
 * costs one load. */
static CUresult mirrors_synced(const struct cli_synced *sync, CUresult res)
{
    if (res == CUDA_SUCCESS && __atomic_load_n(&cli_mirror_ndirty, __ATOMIC_ACQUIRE) != 0)
        mirrors_pull(sync->sess);
    return res;
}

__attribute__((constructor)) static void mirrors_hooks(void)
{
    cli_session_on_synced(CLI_SYNCED_MIRRORS, mirrors_synced);
}

void cli_mirror_forget(uintptr_t base)
{
    if (__atomic_load_n(&nmirrors, __ATOMIC_ACQUIRE) == 0)
        return;
    pthread_mutex_lock(&mirror_lock);
    for (unsigned i = 0; i < nmirrors;) {
        struct mirror *m = &mirrors[i];
        struct cli_call call = {CLI_ARGS(HOST_MIRROR_UNMAP, .addr = m->base)};
        if (m->base != base) {
            i++;
            continue;
        }
        if (m->state != MIRROR_FAILED) {
            call.ctx = m->ctx;
            call.sess = m->sess;
            (void)cli_call_sync(&call); /* if it fails, the session's end frees it */
        }
        if (m->state == MIRROR_DIRTY)
            dirty_add(-1);
        *m = mirrors[nmirrors - 1];
        __atomic_store_n(&nmirrors, nmirrors - 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mirror_lock);
}
