/* Virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess, as
 * PyTorch's expandable segments use them) and memory pools (cuMemPoolCreate,
 * cuMemAllocFromPoolAsync, the devices' default and current pools). Physical VMM memory counts
 * against the session's quota from cuMemCreate until its handle is released and its last mapping
 * unmapped, as long as the driver keeps it (releasing right after mapping is legal and common:
 * NVIDIA's vectorAddMMAP does it); pool allocations from cuMemAllocFromPoolAsync to their free.
 * Device ordinals inside the structures the client sends are the client's and are mapped to the
 * server's here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "server/session.h"

/* A CUmemLocation of type DEVICE names the client's ordinal: map it (false if out of range). */
static bool location_map(struct srv_session *s, CUmemLocation *loc)
{
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return true;
    if (loc->id < 0 || loc->id >= s->ndevices)
        return false;
    loc->id = s->devices[loc->id];
    return true;
}

/* The call's data as one T (copied, so it can be rewritten); false if the size is wrong. */
#define DATA_AS(call, var)                                                                         \
    ((call)->msg->data.len == sizeof(var) && memcpy(&(var), (call)->msg->data.data, sizeof(var)))

/* The call's data as an array of CUmemAccessDesc with mapped locations, in session scratch. */
static CUmemAccessDesc *access_descs(struct srv_session *s, struct srv_call *call, size_t *n_p)
{
    size_t n = call->msg->data.len / sizeof(CUmemAccessDesc);
    CUmemAccessDesc *d;

    if (n == 0 || n * sizeof(*d) != call->msg->data.len ||
        (d = srv_scratch(s, n * sizeof(*d))) == NULL)
        return NULL;
    memcpy(d, call->msg->data.data, n * sizeof(*d));
    for (size_t i = 0; i < n; i++)
        if (!location_map(s, &d[i].location))
            return NULL;
    *n_p = n;
    return d;
}

/* One cuMemCreate: its charge, its mappings, whether its handle was released. A slot is free
 * when both the handle and every mapping are gone; the charge goes back then. */
struct srv_vmm_phys {
    CUmemGenericAllocationHandle mh; /* unique among the handles not yet released */
    uint64_t size;
    uint32_t maps;
    bool live, released;
};

struct srv_vmm_map {
    CUdeviceptr va;
    size_t size;
    size_t phys; /* index in phys */
};

/* The component's state: physical memory records and their mappings. */
struct vmm_state {
    struct srv_vmm_phys *phys;
    size_t nphys, phys_cap;
    struct srv_vmm_map *maps;
    size_t nmaps, map_cap;
};

static struct vmm_state *vmm_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_VMM);
}

/* The record of the live (not released) handle mh; SIZE_MAX if there is none. */
static size_t phys_find(const struct vmm_state *v, CUmemGenericAllocationHandle mh)
{
    for (size_t i = 0; i < v->nphys; i++)
        if (v->phys[i].live && !v->phys[i].released && v->phys[i].mh == mh)
            return i;
    return SIZE_MAX;
}

static bool phys_add(struct vmm_state *v, CUmemGenericAllocationHandle mh, uint64_t size)
{
    size_t i = 0;

    while (i < v->nphys && v->phys[i].live)
        i++;
    if (i == v->nphys && !rg_array_grow((void **)&v->phys, &v->phys_cap, i, sizeof(*v->phys), 16))
        return false;
    v->phys[i] = (struct srv_vmm_phys){.mh = mh, .size = size, .live = true};
    if (i == v->nphys)
        v->nphys++;
    return true;
}

/* Drop one reference (the handle's or a mapping's) of record i; the last gives the charge back. */
static void phys_put(struct srv_session *s, size_t i)
{
    struct srv_vmm_phys *ph = &vmm_of(s)->phys[i];

    if (ph->maps > 0 || !ph->released)
        return;
    srv_quota_release(s, ph->size);
    ph->live = false;
}

/* Physical memory handles, then pools (after the modules, before the contexts); the records
 * go with them (the driver frees mapped memory with its contexts). */
static void vmm_teardown(struct srv_session *s, void *state)
{
    struct vmm_state *v = state;

    srv_handles_destroy_all(s, PROTO_H_MEM_HANDLE);
    srv_handles_destroy_all(s, PROTO_H_MEM_POOL);
    free(v->phys);
    free(v->maps);
    v->phys = NULL, v->maps = NULL;
    v->nphys = v->phys_cap = v->nmaps = v->map_cap = 0;
}

const struct srv_component srv_vmm_component = {
    .name = "vmm", .state_size = sizeof(struct vmm_state), .teardown = vmm_teardown};

CUresult srv_op_address_reserve(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ADDRESS_RESERVE *a = SRV_ARGS(call, MEM_ADDRESS_RESERVE);
    CUdeviceptr p;
    CUresult res = s->drv.cuMemAddressReserve(&p, a->size, a->alignment, a->addr, a->flags);

    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = p;
    return res;
}

CUresult srv_op_address_free(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ADDRESS_FREE *a = SRV_ARGS(call, MEM_ADDRESS_FREE);
    return s->drv.cuMemAddressFree(a->ptr, a->size);
}

CUresult srv_op_mem_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_CREATE *a = SRV_ARGS(call, MEM_CREATE);
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle mh;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_MEM_HANDLE || !DATA_AS(call, prop))
        return CUDA_ERROR_INVALID_VALUE;
    if (!location_map(s, &prop.location))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!srv_quota_charge(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemCreate(&mh, a->size, &prop, a->flags);
    if (res == CUDA_SUCCESS && !phys_add(vmm_of(s), mh, a->size)) {
        s->drv.cuMemRelease(mh);
        res = CUDA_ERROR_OUT_OF_MEMORY;
    }
    res = srv_handle_adopt(s, a->id, PROTO_H_MEM_HANDLE, res, (void *)(uintptr_t)mh);
    if (res != CUDA_SUCCESS) {
        size_t i = phys_find(vmm_of(s), mh);
        if (i != SIZE_MAX) /* adopt refused the id and released mh */
            vmm_of(s)->phys[i].live = false;
        srv_quota_release(s, a->size);
        return res;
    }
    srv_handle_get(s, a->id, PROTO_H_MEM_HANDLE)->size = a->size;
    return CUDA_SUCCESS;
}

/* The handle goes; its charge stays while a mapping holds the memory. */
CUresult srv_op_mem_release(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_RELEASE *a = SRV_ARGS(call, MEM_RELEASE);
    struct srv_handle *h = srv_handle_get(s, a->handle, PROTO_H_MEM_HANDLE);
    size_t i;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    i = phys_find(vmm_of(s), (CUmemGenericAllocationHandle)(uintptr_t)h->real);
    if (i != SIZE_MAX)
        h->size = 0; /* the record carries the charge from here */
    res = srv_handle_destroy(s, a->handle, PROTO_H_MEM_HANDLE);
    if (i != SIZE_MAX) {
        vmm_of(s)->phys[i].released = true;
        phys_put(s, i);
    }
    return res;
}

CUresult srv_op_mem_map(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_MAP *a = SRV_ARGS(call, MEM_MAP);
    struct srv_handle *h = srv_handle_get(s, a->handle, PROTO_H_MEM_HANDLE);
    struct vmm_state *v = vmm_of(s);
    CUmemGenericAllocationHandle mh;
    size_t i;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    mh = (CUmemGenericAllocationHandle)(uintptr_t)h->real;
    if ((i = phys_find(v, mh)) == SIZE_MAX ||
        !rg_array_grow((void **)&v->maps, &v->map_cap, v->nmaps, sizeof(*v->maps), 16))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemMap(a->ptr, a->size, a->offset, mh, a->flags);
    if (res != CUDA_SUCCESS)
        return res;
    v->maps[v->nmaps++] = (struct srv_vmm_map){a->ptr, a->size, i};
    v->phys[i].maps++;
    return CUDA_SUCCESS;
}

/* Every mapping inside the unmapped range goes (the driver unmaps whole mappings only). */
CUresult srv_op_mem_unmap(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_UNMAP *a = SRV_ARGS(call, MEM_UNMAP);
    CUdeviceptr va = a->ptr;
    size_t size = a->size;
    struct vmm_state *v = vmm_of(s);
    CUresult res = s->drv.cuMemUnmap(va, size);

    if (res != CUDA_SUCCESS)
        return res;
    for (size_t k = 0; k < v->nmaps;) {
        struct srv_vmm_map *m = &v->maps[k];
        if (m->va < va || m->va - va > size || m->size > size - (m->va - va)) {
            k++;
            continue;
        }
        size_t i = m->phys;
        *m = v->maps[--v->nmaps];
        v->phys[i].maps--;
        phys_put(s, i);
    }
    return CUDA_SUCCESS;
}

CUresult srv_op_mem_set_access(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_SET_ACCESS *a = SRV_ARGS(call, MEM_SET_ACCESS);
    size_t n;
    CUmemAccessDesc *d = access_descs(s, call, &n);

    return d ? s->drv.cuMemSetAccess(a->ptr, a->size, d, n) : CUDA_ERROR_INVALID_VALUE;
}

CUresult srv_op_mem_get_access(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_GET_ACCESS *a = SRV_ARGS(call, MEM_GET_ACCESS);
    CUmemLocation loc;
    unsigned long long flags;
    CUresult res;

    if (!DATA_AS(call, loc) || !location_map(s, &loc))
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuMemGetAccess(&flags, &loc, a->ptr);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = flags;
    return res;
}

CUresult srv_op_mem_granularity(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_GET_GRANULARITY *a = SRV_ARGS(call, MEM_GET_GRANULARITY);
    CUmemAllocationProp prop;
    size_t g;
    CUresult res;

    if (!DATA_AS(call, prop) || !location_map(s, &prop.location))
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuMemGetAllocationGranularity(&g, &prop,
                                               (CUmemAllocationGranularity_flags)a->option);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = g;
    return res;
}

/* ---- pools ---- */

/* The driver pool for a wire id: a created pool, or a device's default pool (looked up once). */
static CUresult pool_get(struct srv_session *s, uint64_t id, CUmemoryPool *pool_p)
{
    struct srv_handle *h;
    uint64_t dev = (id >> 4) - 1;
    CUresult res;

    if (PROTO_ID_TYPE(id) != PROTO_H_MEM_POOL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((h = srv_handle_get(s, id, PROTO_H_MEM_POOL)) != NULL) {
        *pool_p = h->real;
        return CUDA_SUCCESS;
    }
    if (id >= ((uint64_t)PROTO_ID_FIRST_COUNTER << 4) || dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuDeviceGetDefaultMemPool(pool_p, s->devices[dev]);
    if (res == CUDA_SUCCESS && srv_handle_put(s, id, *pool_p) == RG_OK)
        srv_handle_get(s, id, PROTO_H_MEM_POOL)->borrowed = true; /* the driver's own */
    return res;
}

CUresult srv_op_pool_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_POOL_CREATE *a = SRV_ARGS(call, MEM_POOL_CREATE);
    CUmemPoolProps props;
    CUmemoryPool pool;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_MEM_POOL ||
        a->id < ((uint64_t)PROTO_ID_FIRST_COUNTER << 4) || !DATA_AS(call, props))
        return CUDA_ERROR_INVALID_VALUE;
    if (!location_map(s, &props.location))
        return CUDA_ERROR_INVALID_DEVICE;
    res = s->drv.cuMemPoolCreate(&pool, &props);
    return srv_handle_adopt(s, a->id, PROTO_H_MEM_POOL, res, pool);
}

CUresult srv_op_pool_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_POOL_DESTROY *a = SRV_ARGS(call, MEM_POOL_DESTROY);
    struct srv_handle *h = srv_handle_get(s, a->pool, PROTO_H_MEM_POOL);

    if (h == NULL || h->borrowed)
        return CUDA_ERROR_INVALID_HANDLE;
    return srv_handle_destroy(s, a->pool, PROTO_H_MEM_POOL);
}

static bool attr_is_int(uint64_t attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

CUresult srv_op_pool_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_POOL_SET_ATTR *a = SRV_ARGS(call, MEM_POOL_SET_ATTR);
    CUmemoryPool pool;
    int iv = (int)a->value;
    cuuint64_t v = a->value;
    void *value = attr_is_int(a->attr) ? (void *)&iv : (void *)&v;
    CUresult res = pool_get(s, a->pool, &pool);

    if (res != CUDA_SUCCESS)
        return res;
    if (call->msg->op == PROTO_OP_MEM_POOL_SET_ATTR)
        return s->drv.cuMemPoolSetAttribute(pool, (CUmemPool_attribute)a->attr, value);
    if (call->msg->n_args < 2)
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuMemPoolGetAttribute(pool, (CUmemPool_attribute)a->attr, value);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = attr_is_int(a->attr) ? (uint64_t)(int64_t)iv : v;
    return res;
}

CUresult srv_op_pool_trim(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_POOL_TRIM *a = SRV_ARGS(call, MEM_POOL_TRIM);
    CUmemoryPool pool;
    CUresult res = pool_get(s, a->pool, &pool);

    return res == CUDA_SUCCESS ? s->drv.cuMemPoolTrimTo(pool, a->keep) : res;
}

CUresult srv_op_pool_set_access(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_POOL_SET_ACCESS *a = SRV_ARGS(call, MEM_POOL_SET_ACCESS);
    CUmemoryPool pool;
    size_t n;
    CUmemAccessDesc *d;
    CUresult res = pool_get(s, a->pool, &pool);

    if (res != CUDA_SUCCESS)
        return res;
    d = access_descs(s, call, &n);
    return d ? s->drv.cuMemPoolSetAccess(pool, d, n) : CUDA_ERROR_INVALID_VALUE;
}

CUresult srv_op_alloc_from_pool(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ALLOC_FROM_POOL *a = SRV_ARGS(call, MEM_ALLOC_FROM_POOL);
    CUmemoryPool pool;
    CUstream st;
    CUdeviceptr d;
    CUresult res = pool_get(s, a->pool, &pool);

    if (res != CUDA_SUCCESS)
        return res;
    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!srv_quota_allows(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemAllocFromPoolAsync(&d, a->size, pool, st);
    return srv_alloc_answer(s, call, res, d, a->size);
}

CUresult srv_op_set_device_pool(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_DEVICE_SET_MEM_POOL *a = SRV_ARGS(call, DEVICE_SET_MEM_POOL);
    CUmemoryPool pool;
    CUresult res;

    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    res = pool_get(s, a->pool, &pool);
    return res == CUDA_SUCCESS ? s->drv.cuDeviceSetMemPool(s->devices[a->dev], pool) : res;
}
