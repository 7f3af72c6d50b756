/* A session's tables (handles by client id, allocations), its contexts, and its teardown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/log.h"
#include "server/component.h"
#include "server/lanes.h"
#include "server/module_cache.h"
#include "server/session.h"
#include "server/nccl.h"

static size_t slot_of(uint64_t id, size_t cap)
{
    return (size_t)((id >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

static rg_status_t handles_grow(struct srv_session *s)
{
    size_t cap = s->handle_cap ? s->handle_cap * 2 : 256;
    struct srv_handle *old = s->handles, *h = calloc(cap, sizeof(*h));

    if (h == NULL)
        return RG_ERR_NOMEM;
    for (size_t i = 0; i < s->handle_cap; i++) {
        size_t j = slot_of(old[i].id, cap);
        if (old[i].id == 0)
            continue;
        while (h[j].id != 0)
            j = (j + 1) & (cap - 1);
        h[j] = old[i];
    }
    free(old);
    s->handles = h;
    s->handle_cap = cap;
    return RG_OK;
}

struct srv_handle *srv_handle_get(struct srv_session *s, uint64_t id, unsigned type)
{
    if (s->handle_cap == 0 || id == 0 || (type != 0 && PROTO_ID_TYPE(id) != type))
        return NULL;
    for (size_t j = slot_of(id, s->handle_cap);; j = (j + 1) & (s->handle_cap - 1)) {
        if (s->handles[j].id == id)
            return &s->handles[j];
        if (s->handles[j].id == 0)
            return NULL;
    }
}

rg_status_t srv_handle_put(struct srv_session *s, uint64_t id, void *real)
{
    size_t j;

    if (id == 0 || srv_handle_get(s, id, 0) != NULL)
        return RG_ERR_INVALID;
    if ((s->nhandles + 1) * 2 > s->handle_cap && handles_grow(s) != RG_OK)
        return RG_ERR_NOMEM;
    for (j = slot_of(id, s->handle_cap); s->handles[j].id != 0; j = (j + 1) & (s->handle_cap - 1))
        ;
    s->handles[j] = (struct srv_handle){.id = id, .real = real, .nparams = 0xffffffffu};
    s->nhandles++;
    return RG_OK;
}

/* Deletion with backward-shift, so probing chains stay intact. */
void srv_handle_del(struct srv_session *s, uint64_t id)
{
    struct srv_handle *h = srv_handle_get(s, id, 0);
    size_t i, j, k;

    if (h == NULL)
        return;
    free(h->layout);
    i = (size_t)(h - s->handles);
    s->handles[i].id = 0;
    for (j = (i + 1) & (s->handle_cap - 1); s->handles[j].id != 0;
         j = (j + 1) & (s->handle_cap - 1)) {
        k = slot_of(s->handles[j].id, s->handle_cap);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            s->handles[i] = s->handles[j];
            s->handles[j].id = 0;
            i = j;
        }
    }
    s->nhandles--;
}

void *srv_scratch(struct srv_session *s, size_t len)
{
    if (len > s->scratch_len) {
        size_t cap = len < 65536 ? 65536 : (len + 65535) & ~(size_t)65535;
        void *p = aligned_alloc(16, cap);
        if (p == NULL)
            return NULL;
        if (s->scratch != NULL) /* keep the contents: callers grow a block they filled */
            memcpy(p, s->scratch, s->scratch_len);
        free(s->scratch);
        s->scratch = p;
        s->scratch_len = cap;
    }
    return s->scratch;
}

static CUresult primary_bind(struct srv_session *s, uint64_t ctx_id, CUcontext *ctx_p)
{
    uint64_t dev = (ctx_id >> 4) - 1;
    CUresult res;

    if (dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (s->primary[dev] == NULL) {
        res = s->drv.cuDevicePrimaryCtxRetain(&s->primary[dev], s->devices[dev]);
        if (res != CUDA_SUCCESS)
            return res;
    }
    *ctx_p = s->primary[dev];
    return CUDA_SUCCESS;
}

CUresult srv_ctx_real(struct srv_session *s, uint64_t ctx_id, CUcontext *ctx_p)
{
    struct srv_handle *h;

    if (ctx_id < ((uint64_t)PROTO_ID_FIRST_COUNTER << 4))
        return primary_bind(s, ctx_id, ctx_p);
    if ((h = srv_handle_get(s, ctx_id, PROTO_H_CTX)) == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx_p = h->real;
    return CUDA_SUCCESS;
}

CUresult srv_use_ctx(struct srv_session *s, uint64_t ctx_id)
{
    CUcontext ctx;
    CUresult res;

    if (ctx_id == 0 || ctx_id == s->current_ctx)
        return CUDA_SUCCESS;
    if ((res = srv_ctx_real(s, ctx_id, &ctx)) != CUDA_SUCCESS)
        return res;
    res = s->drv.cuCtxSetCurrent(ctx);
    if (res == CUDA_SUCCESS)
        s->current_ctx = ctx_id;
    return res;
}

bool srv_stream(struct srv_session *s, uint64_t id, CUstream *stream_p)
{
    struct srv_handle *h;

    switch (id) {
    case PROTO_STREAM_NULL:
        *stream_p = NULL;
        return true;
    case PROTO_STREAM_LEGACY:
        *stream_p = CU_STREAM_LEGACY;
        return true;
    case PROTO_STREAM_PER_THREAD:
        *stream_p = CU_STREAM_PER_THREAD;
        return true;
    }
    if ((h = srv_handle_get(s, id, PROTO_H_STREAM)) == NULL)
        return false;
    *stream_p = h->real;
    return true;
}

/* The driver call that ends an object of the given handle type. */
static CUresult destroy_real(struct srv_session *s, unsigned type, void *real)
{
    switch (type) {
    case PROTO_H_STREAM:
        return s->drv.cuStreamDestroy(real);
    case PROTO_H_EVENT:
        return s->drv.cuEventDestroy(real);
    case PROTO_H_MODULE:
        return s->drv.cuModuleUnload(real);
    case PROTO_H_LIBRARY:
        return srv_library_unload(s, real);
    case PROTO_H_CTX:
        return s->drv.cuCtxDestroy(real);
    case PROTO_H_GRAPH_EXEC:
        return s->drv.cuGraphExecDestroy(real);
    case PROTO_H_GRAPH:
        return s->drv.cuGraphDestroy(real);
    case PROTO_H_MEM_POOL:
        return s->drv.cuMemPoolDestroy(real);
    case PROTO_H_SHADOW:
        return s->drv.cuMemFreeHost(real);
    case PROTO_H_LINK:
        srv_link_free(s, real);
        return CUDA_SUCCESS;
    case PROTO_H_IMAGE:
        return srv_array_object_destroy(s, real);
    case PROTO_H_MEM_HANDLE:
        return s->drv.cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)real);
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult srv_handle_destroy(struct srv_session *s, uint64_t id, unsigned type)
{
    struct srv_handle *h = srv_handle_get(s, id, type);
    void *real;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    real = h->real;
    /* VMM physical memory, modules' globals, graphs' memory nodes and shadows leave the quota */
    if (type == PROTO_H_MEM_HANDLE || type == PROTO_H_MODULE || type == PROTO_H_LIBRARY ||
        type == PROTO_H_GRAPH || type == PROTO_H_SHADOW)
        srv_quota_release(s, h->size);
    srv_handle_del(s, id);
    return destroy_real(s, type, real);
}

CUresult srv_handle_adopt(struct srv_session *s, uint64_t id, unsigned type, CUresult res,
                          void *real)
{
    if (res != CUDA_SUCCESS)
        return res;
    if (PROTO_ID_TYPE(id) == type && srv_handle_put(s, id, real) == RG_OK)
        return CUDA_SUCCESS;
    destroy_real(s, type, real);
    return CUDA_ERROR_INVALID_HANDLE;
}

void srv_handles_destroy_all(struct srv_session *s, unsigned type)
{
    for (size_t i = 0; i < s->handle_cap; i++) {
        struct srv_handle *h = &s->handles[i];
        if (h->id != 0 && PROTO_ID_TYPE(h->id) == type && !h->borrowed)
            destroy_real(s, type, h->real);
    }
}

static void free_tables(struct srv_session *s)
{
    for (size_t i = 0; i < s->handle_cap; i++)
        free(s->handles[i].layout);
    free(s->handles);
    s->handles = NULL;
    s->handle_cap = s->nhandles = 0;
}

/* What the worker's resident memory is made of while the session still holds everything
 * (anonymous: heap, the driver's own; file: mapped libraries and module-cache images; shmem),
 * from /proc/self/status, into buf as "anon X file Y shmem Z MiB". */
static void rss_parts(char *buf, size_t len)
{
    static const char *keys[] = {"RssAnon:", "RssFile:", "RssShmem:"};
    unsigned long kb[3] = {0, 0, 0};
    char line[128];
    FILE *f = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        for (int i = 0; i < 3; i++)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0)
                kb[i] = strtoul(line + strlen(keys[i]), NULL, 10);
    if (f != NULL)
        fclose(f);
    snprintf(buf, len, "anon %.1f file %.1f shmem %.1f MiB", kb[0] / 1024.0, kb[1] / 1024.0,
             kb[2] / 1024.0);
}

rg_status_t srv_session_init(struct srv_session *s)
{
    return srv_components_init(&s->comps, srv_component_table, SRV_COMP_COUNT, s);
}

void srv_session_teardown(struct srv_session *s)
{
    bool served = s->served;
    char parts[96];
    struct rusage ru;
    uint64_t bytes;
    size_t n;

    if (served) {
        rss_parts(parts, sizeof(parts));
        rg_info("session %llu: worker resident memory before teardown: %s",
                (unsigned long long)s->id, parts);
    }
    srv_components_teardown(&s->comps, srv_component_table, SRV_COMP_COUNT, s);
    if (served) {
        srv_alloc_freed(s, &n, &bytes);
        getrusage(RUSAGE_SELF, &ru);
        rg_info("session %llu: freed %zu allocation(s), %.1f MiB, and %zu handle(s); worker peak "
                "RSS %.1f MiB, pinned staging %.1f MiB",
                (unsigned long long)s->id, n, bytes / 1048576.0, s->nhandles, ru.ru_maxrss / 1024.0,
                (srv_staging_most(s) + srv_lanes_staging_most(s)) / 1048576.0);
    }
    srv_components_free(&s->comps, SRV_COMP_COUNT);
    free_tables(s);
}

void *srv_handle_real(struct srv_session *s, uint64_t id, unsigned type)
{
    struct srv_handle *h = srv_handle_get(s, id, type);

    return h != NULL ? h->real : NULL;
}

/* A function or a kernel (the driver takes a CUkernel wherever a CUfunction is taken). */
struct srv_handle *srv_func_handle(struct srv_session *s, uint64_t id)
{
    unsigned type = PROTO_ID_TYPE(id);

    if (type != PROTO_H_FUNCTION && type != PROTO_H_KERNEL)
        return NULL;
    return srv_handle_get(s, id, type);
}

CUresult srv_bind_new(struct srv_session *s, uint64_t id, unsigned type, void *real)
{
    if (PROTO_ID_TYPE(id) != type || srv_handle_put(s, id, real) != RG_OK)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}
