/* Pinned host memory of the client mirrored in the worker at the same virtual address
 * (docs/ARCHITECTURE.md, "Mapped pinned host memory"). Under unified addressing a pinned host
 * buffer's device address is its host address, so a kernel argument, a memset or a copy that
 * names the client's buffer works here unchanged once the same pages exist in this process and
 * are registered with the driver. The client decides when (client/bulk/host_mirror.c): it maps a
 * range the first time GPU work references it, pushes its bytes before GPU work while they are
 * its own (CLEAN), and pulls what the GPU wrote after a synchronization. The worker keeps a
 * reference copy of each mirror, what both sides last agreed on, so a pull returns only the
 * bytes the GPU changed and host writes made meanwhile elsewhere in the range survive. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/array_grow.h"
#include "common/map_at.h"
#include "common/log.h"
#include "server/session.h"

#define PAGE      ((uintptr_t)4096)
#define MERGE_GAP 32u /* equal bytes between two changed runs below which they become one */

/* A mirror: [base, base + len) mapped in the worker and registered with the driver; ref is the
 * copy the client last sent or was last sent, against which HOST_MIRROR_PULL finds the GPU's
 * writes. */
struct srv_host_mirror {
    uintptr_t base;
    size_t len;
    uint8_t *ref;
};

/* The component's state. */
struct host_mirror_state {
    struct srv_host_mirror *mirrors;
    size_t n, cap;
    bool refusal_logged;
};

static struct host_mirror_state *mirrors_of(const struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_HOST_MIRROR);
}

static struct srv_host_mirror *mirror_find(struct srv_session *s, uintptr_t addr, size_t len)
{
    struct host_mirror_state *hm = mirrors_of(s);

    for (size_t i = 0; i < hm->n; i++) {
        struct srv_host_mirror *m = &hm->mirrors[i];
        if (addr >= m->base && addr - m->base < m->len && len <= m->len - (addr - m->base))
            return m;
    }
    return NULL;
}

static bool mirror_overlaps(const struct srv_session *s, uintptr_t base, size_t len)
{
    struct host_mirror_state *hm = mirrors_of(s);

    for (size_t i = 0; i < hm->n; i++)
        if (base < hm->mirrors[i].base + hm->mirrors[i].len && hm->mirrors[i].base < base + len)
            return true;
    return false;
}

static size_t mirrored_bytes(const struct srv_session *s)
{
    struct host_mirror_state *hm = mirrors_of(s);
    size_t n = 0;

    for (size_t i = 0; i < hm->n; i++)
        n += hm->mirrors[i].len;
    return n;
}

/* Refusals are the client's to handle (it leaves the range unmirrored); said once. */
static CUresult refuse(struct srv_session *s, CUresult res, uintptr_t base, size_t len,
                       const char *why)
{
    struct host_mirror_state *hm = mirrors_of(s);

    if (!hm->refusal_logged)
        rg_warn("session %llu: pinned host memory [%#lx, +%zu) not mirrored: %s (further "
                "refusals not logged)",
                (unsigned long long)s->id, (unsigned long)base, len, why);
    hm->refusal_logged = true;
    return res;
}

/* Registering is an operation a stream capture in global mode forbids (the first launch that
 * names the buffer may be a captured one): done in relaxed mode, as the driver's own pinned
 * allocations during capture are. */
static CUresult host_register(struct srv_session *s, uintptr_t base, size_t len)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUresult res;

    s->drv.cuThreadExchangeStreamCaptureMode(&mode);
    res = s->drv.cuMemHostRegister((void *)base, len,
                                   CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
    s->drv.cuThreadExchangeStreamCaptureMode(&mode);
    return res;
}

/* The whole point is that the GPU reaches the mirror at the client's address: a device without
 * CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM maps it elsewhere. */
static CUresult same_address(struct srv_session *s, uintptr_t base)
{
    CUdeviceptr d = 0;
    CUresult res = s->drv.cuMemHostGetDevicePointer(&d, (void *)base, 0);

    if (res != CUDA_SUCCESS)
        return refuse(s, res, base, 0, "cuMemHostGetDevicePointer failed");
    if (d != (CUdeviceptr)base)
        return refuse(s, CUDA_ERROR_NOT_SUPPORTED, base, 0,
                      "the device maps registered host memory at another address");
    return CUDA_SUCCESS;
}

CUresult srv_op_host_mirror_map(struct srv_session *s, struct srv_call *call)
{
    struct host_mirror_state *hm = mirrors_of(s);
    const struct proto_args_HOST_MIRROR_MAP *a = SRV_ARGS(call, HOST_MIRROR_MAP);
    uintptr_t base = a->addr & ~(PAGE - 1), end = a->addr + a->size;
    size_t len;
    uint8_t *ref;
    CUresult res;

    if (a->size == 0 || a->size > SRV_HOST_MIRROR_MAX || end < a->addr || end > UINTPTR_MAX - PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    len = ((end + PAGE - 1) & ~(PAGE - 1)) - base;
    if (mirror_find(s, a->addr, a->size) != NULL)
        return CUDA_SUCCESS;
    if (mirror_overlaps(s, base, len))
        return refuse(s, CUDA_ERROR_INVALID_VALUE, base, len, "its pages overlap another mirror");
    if (hm->n == SRV_MAX_HOST_MIRRORS || mirrored_bytes(s) + len > SRV_HOST_MIRROR_MAX)
        return refuse(s, CUDA_ERROR_OUT_OF_MEMORY, base, len, "the session's mirror bound");
    if (!rg_array_grow((void **)&hm->mirrors, &hm->cap, hm->n, sizeof(*hm->mirrors), 8))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!srv_quota_charge(s, len))
        return refuse(s, CUDA_ERROR_OUT_OF_MEMORY, base, len, "over the memory quota");
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if ((ref = calloc(1, len)) == NULL)
        goto err_release;
    res = CUDA_ERROR_INVALID_VALUE;
    if (!rg_map_at(base, len)) { /* the same address or nothing */
        refuse(s, res, base, len, "the address is taken in the worker");
        goto err_free_ref;
    }
    res = host_register(s, base, len);
    if (res != CUDA_SUCCESS) {
        refuse(s, res, base, len, "cuMemHostRegister failed");
        goto err_unmap;
    }
    if ((res = same_address(s, base)) != CUDA_SUCCESS)
        goto err_unregister;
    hm->mirrors[hm->n++] = (struct srv_host_mirror){base, len, ref};
    return CUDA_SUCCESS;

err_unregister:
    s->drv.cuMemHostUnregister((void *)base);
err_unmap:
    munmap((void *)base, len);
err_free_ref:
    free(ref);
err_release:
    srv_quota_release(s, len);
    return res;
}

CUresult srv_op_host_mirror_push(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_HOST_MIRROR_PUSH *a = SRV_ARGS(call, HOST_MIRROR_PUSH);
    struct srv_host_mirror *m = mirror_find(s, a->addr, a->size);
    rg_status_t st;

    if (m == NULL || a->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    st = srv_recv_input(s, call, (void *)(uintptr_t)a->addr, a->size);
    if (st == RG_ERR_INVALID)
        return CUDA_ERROR_INVALID_VALUE;
    if (st != RG_OK)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    memcpy(m->ref + (a->addr - m->base), (const void *)(uintptr_t)a->addr, a->size);
    return CUDA_SUCCESS;
}

/* Append a record {addr, len, bytes} to the reply being built. */
static bool record(uint8_t **buf, size_t *cap, size_t *used, uintptr_t addr, const void *p,
                   size_t len)
{
    uint64_t hdr[2] = {addr, len};

    if (*used + sizeof(hdr) + len > *cap) {
        size_t n = (*used + sizeof(hdr) + len) * 2;
        uint8_t *q = realloc(*buf, n);
        if (q == NULL)
            return false;
        *buf = q, *cap = n;
    }
    memcpy(*buf + *used, hdr, sizeof(hdr));
    memcpy(*buf + *used + sizeof(hdr), p, len);
    *used += sizeof(hdr) + len;
    return true;
}

/* The runs where the mirror differs from its reference copy, as records; the copy is updated. */
static bool diff(struct srv_host_mirror *m, uint8_t **buf, size_t *cap, size_t *used)
{
    const uint8_t *cur = (const uint8_t *)m->base;
    size_t i = 0, start, end;

    while (i < m->len) {
        if (cur[i] == m->ref[i]) {
            i++;
            continue;
        }
        start = end = i;
        for (size_t same = 0; i < m->len && same < MERGE_GAP; i++) {
            same = cur[i] == m->ref[i] ? same + 1 : 0;
            if (same == 0)
                end = i;
        }
        if (!record(buf, cap, used, m->base + start, cur + start, end + 1 - start))
            return false;
        memcpy(m->ref + start, cur + start, end + 1 - start);
    }
    return true;
}

CUresult srv_op_host_mirror_pull(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_HOST_MIRROR_PULL *a = SRV_ARGS(call, HOST_MIRROR_PULL);
    const ProtobufCBinaryData *d = &call->msg->data;
    struct srv_host_mirror *m[SRV_MAX_HOST_MIRRORS];
    uint8_t *buf = NULL;
    size_t cap = 0, used = 0;
    CUresult res = CUDA_SUCCESS;

    if (a->n == 0 || a->n > SRV_MAX_HOST_MIRRORS || d->len != 8 * a->n)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < a->n; i++) { /* all known before any reference copy changes */
        uint64_t addr;
        memcpy(&addr, d->data + 8 * i, 8);
        if ((m[i] = mirror_find(s, addr, 1)) == NULL)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < a->n && res == CUDA_SUCCESS; i++)
        if (!diff(m[i], &buf, &cap, &used))
            res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS)
        res = srv_reply_bulk(s, call, buf, used);
    free(buf);
    return res;
}

static void mirror_drop(struct srv_session *s, struct srv_host_mirror *m)
{
    s->drv.cuMemHostUnregister((void *)m->base);
    munmap((void *)m->base, m->len);
    free(m->ref);
    srv_quota_release(s, m->len);
}

CUresult srv_op_host_mirror_unmap(struct srv_session *s, struct srv_call *call)
{
    struct host_mirror_state *hm = mirrors_of(s);
    const struct proto_args_HOST_MIRROR_UNMAP *a = SRV_ARGS(call, HOST_MIRROR_UNMAP);
    struct srv_host_mirror *m = mirror_find(s, a->addr, 1);
    CUresult res;

    if (m == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuCtxSynchronize(); /* no GPU work may still touch it (as cuMemFreeHost) */
    mirror_drop(s, m);
    *m = hm->mirrors[--hm->n];
    return res;
}

/* Unregister and unmap every mirror, while the session's contexts live. */
static void host_mirror_teardown(struct srv_session *s, void *state)
{
    struct host_mirror_state *hm = mirrors_of(s);

    for (size_t i = 0; i < hm->n; i++)
        mirror_drop(s, &hm->mirrors[i]);
    free(hm->mirrors);
    hm->mirrors = NULL;
    hm->n = hm->cap = 0;
}

const struct srv_component srv_host_mirror_component = {.name = "host_mirror",
                                                        .state_size =
                                                            sizeof(struct host_mirror_state),
                                                        .teardown = host_mirror_teardown};
