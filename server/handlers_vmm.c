/* Virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess, as
 * PyTorch's expandable segments use them) and memory pools (cuMemPoolCreate,
 * cuMemAllocFromPoolAsync, the devices' default and current pools). Physical VMM memory counts
 * against the session's quota from cuMemCreate to cuMemRelease; pool allocations from
 * cuMemAllocFromPoolAsync to their free. Device ordinals inside the structures the client sends
 * are the client's and are mapped to the server's here. */
#include <string.h>

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
#define DATA_AS(call, var) \
    ((call)->msg->data.len == sizeof(var) && memcpy(&(var), (call)->msg->data.data, sizeof(var)))

/* The call's data as an array of CUmemAccessDesc with mapped locations, in session scratch. */
static CUmemAccessDesc *access_descs(struct srv_session *s, struct srv_call *call, size_t *n_p)
{
    size_t n = call->msg->data.len / sizeof(CUmemAccessDesc);
    CUmemAccessDesc *d;

    if (n == 0 || n * sizeof(*d) != call->msg->data.len || (d = srv_scratch(s, n * sizeof(*d))) == NULL)
        return NULL;
    memcpy(d, call->msg->data.data, n * sizeof(*d));
    for (size_t i = 0; i < n; i++)
        if (!location_map(s, &d[i].location))
            return NULL;
    *n_p = n;
    return d;
}

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
    res = srv_handle_adopt(s, a->id, PROTO_H_MEM_HANDLE, res, (void *)(uintptr_t)mh);
    if (res != CUDA_SUCCESS) {
        srv_quota_release(s, a->size);
        return res;
    }
    srv_handle_get(s, a->id, PROTO_H_MEM_HANDLE)->size = a->size;
    return CUDA_SUCCESS;
}

CUresult srv_op_mem_release(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_RELEASE *a = SRV_ARGS(call, MEM_RELEASE);
    return srv_handle_destroy(s, a->handle, PROTO_H_MEM_HANDLE);
}

CUresult srv_op_mem_map(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_MAP *a = SRV_ARGS(call, MEM_MAP);
    struct srv_handle *h = srv_handle_get(s, a->handle, PROTO_H_MEM_HANDLE);

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuMemMap(a->ptr, a->size, a->offset,
                           (CUmemGenericAllocationHandle)(uintptr_t)h->real, a->flags);
}

CUresult srv_op_mem_unmap(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_UNMAP *a = SRV_ARGS(call, MEM_UNMAP);
    return s->drv.cuMemUnmap(a->ptr, a->size);
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
