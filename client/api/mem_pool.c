/* Memory pools for stream-ordered allocation: created pools and each device's default pool
 * are client handles (the default pool's id is fixed per device, PROTO_DEFAULT_POOL_ID); the
 * device's current pool is remembered here and set on the server too, so cuMemAllocAsync
 * draws from it there. IPC of pools (export/import) is refused: the peer process would be on
 * another host. */
#include <stdlib.h>

#include "client/objects/address_ranges.h"
#include "client/api/api.h"

#define MAX_POOL_DEVICES 64

struct cli_pool {
    struct cli_handle h;
    int device;
};

static struct cli_pool default_pools[MAX_POOL_DEVICES];
static struct cli_pool *current_pools[MAX_POOL_DEVICES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static struct cli_pool *default_pool(int dev)
{
    struct cli_pool *p = &default_pools[dev];

    pthread_mutex_lock(&pool_lock);
    if (p->h.magic != CLI_HANDLE_MAGIC) {
        p->h = (struct cli_handle){PROTO_DEFAULT_POOL_ID(dev), PROTO_H_MEM_POOL, CLI_HANDLE_MAGIC};
        p->device = dev;
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

static bool device_ok(CUdevice dev)
{
    return cli_initialized() && dev >= 0 && dev < cli_device_count() && dev < MAX_POOL_DEVICES;
}

CLI_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_ok(dev))
        return cli_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    *pool = (CUmemoryPool)default_pool(dev);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    struct cli_pool *p;

    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_ok(dev))
        return cli_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pool_lock);
    p = current_pools[dev];
    pthread_mutex_unlock(&pool_lock);
    *pool = (CUmemoryPool)(p ? p : default_pool(dev));
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);
    CUresult res;

    if (!device_ok(dev))
        return cli_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (p == NULL || p->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_simple(
        &(struct cli_call){CLI_ARGS(DEVICE_SET_MEM_POOL, .dev = (uint64_t)cli_device_remote(dev),
                                    .pool = p->h.id)},
        NULL);
    if (res == CUDA_SUCCESS) {
        pthread_mutex_lock(&pool_lock);
        current_pools[dev] = p;
        pthread_mutex_unlock(&pool_lock);
    }
    return res;
}

CLI_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    struct cli_pool *p;
    CUresult res;

    if (pool == NULL || props == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return cli_unsupported("cuMemPoolCreate with a shareable handle type (IPC)");
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&p->h, PROTO_H_MEM_POOL);
    p->device = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props->location.id : -1;
    res = cli_call_simple(&(struct cli_call){CLI_ARGS(MEM_POOL_CREATE, .id = p->h.id),
                                             .data = props, .data_len = sizeof(*props)},
                          NULL);
    if (res != CUDA_SUCCESS) {
        free(p);
        return res;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);
    CUresult res;

    if (p == NULL || (p >= default_pools && p < default_pools + MAX_POOL_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_simple(&(struct cli_call){CLI_ARGS(MEM_POOL_DESTROY, .pool = p->h.id)}, NULL);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&pool_lock);
    if (p->device >= 0 && p->device < MAX_POOL_DEVICES && current_pools[p->device] == p)
        current_pools[p->device] = NULL; /* the device falls back to its default pool */
    pthread_mutex_unlock(&pool_lock);
    cli_handle_kill(&p->h);
    free(p);
    return CUDA_SUCCESS;
}

static bool attr_is_int(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

CLI_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);
    uint64_t v;

    if (p == NULL || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    v = attr_is_int(attr) ? (uint64_t)(int64_t) * (int *)value : *(cuuint64_t *)value;
    return cli_call_simple(
        &(struct cli_call){CLI_ARGS(MEM_POOL_SET_ATTR, .pool = p->h.id, .attr = attr, .value = v)},
        NULL);
}

CLI_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);
    uint64_t v;
    CUresult res;

    if (p == NULL || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_simple(
        &(struct cli_call){CLI_ARGS(MEM_POOL_GET_ATTR, .pool = p->h.id, .attr = attr)}, &v);
    if (res != CUDA_SUCCESS)
        return res;
    if (attr_is_int(attr))
        *(int *)value = (int)v;
    else
        *(cuuint64_t *)value = v;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_keep)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cli_call_simple(
        &(struct cli_call){CLI_ARGS(MEM_POOL_TRIM, .pool = p->h.id, .keep = min_keep)}, NULL);
}

CLI_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);

    if (p == NULL || map == NULL || count == 0 || count > 64)
        return CUDA_ERROR_INVALID_VALUE;
    return cli_call_simple(&(struct cli_call){CLI_ARGS(MEM_POOL_SET_ACCESS, .pool = p->h.id),
                                              .data = map, .data_len = count * sizeof(*map)},
                           NULL);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream,
                                bool per_thread)
{
    struct cli_pool *p = cli_handle_check(pool, PROTO_H_MEM_POOL);
    uint64_t sid, out;
    CUresult res;

    if (dptr == NULL || size == 0 || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_stream_id(stream, per_thread, &sid))
        return CUDA_ERROR_INVALID_HANDLE;
    res = cli_call_simple(&(struct cli_call){CLI_ARGS(MEM_ALLOC_FROM_POOL, .size = size,
                                                      .pool = p->h.id, .stream = sid)},
                          &out);
    if (res == CUDA_SUCCESS) {
        addr_range_add(MEM_DEVICE, (uintptr_t)out, size, cli_ctx_current(), 0);
        *dptr = (CUdeviceptr)out;
    }
    return res;
}

CLI_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s)
{
    return alloc_from_pool(d, n, pool, s, false);
}
CLI_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool pool,
                                                 CUstream s)
{
    return alloc_from_pool(d, n, pool, s, true);
}
