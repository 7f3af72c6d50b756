/* Virtual memory management: address reservations, physical allocations and their mappings
 * live on the server; the client mints the allocation handles (so cuMemGetAllocation-
 * PropertiesFromHandle and cuMemRetainAllocationHandle are answered here) and records mapped
 * ranges as device memory, so copies and pointer queries on them work like on cuMemAlloc'd
 * memory. Every call waits for its reply: each can fail (out of memory, bad range) and callers
 * such as PyTorch's expandable segments act on the error at once. Granularity queries and
 * physical allocations belong to a device and, as natively, need no current context
 * (cuda-samples' memMapIPCDrv asks after destroying its contexts). */
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "address_ranges.h"

struct vmm_alloc {
    uint64_t id; /* the CUmemGenericAllocationHandle the application holds */
    size_t size;
    CUmemAllocationProp prop;
    unsigned refs; /* 1 + cuMemRetainAllocationHandle calls not yet released */
};

struct vmm_mapping {
    CUdeviceptr va;
    size_t size;
    uint64_t handle;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_alloc *allocs;
static size_t nallocs, alloc_cap;
static struct vmm_mapping *maps;
static size_t nmaps, map_cap;

/* Index of the allocation with that handle; lock held. */
static struct vmm_alloc *alloc_find(uint64_t id)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].id == id)
            return &allocs[i];
    return NULL;
}

CLI_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    struct cli_call call = {CLI_ARGS(MEM_GET_GRANULARITY, .option = option), .data = prop,
                            .data_len = sizeof(*prop)};
    uint64_t out;
    CUresult res;

    if (g == NULL || prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_device(&call, &out);
    if (res == CUDA_SUCCESS)
        *g = (size_t)out;
    return res;
}

CLI_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                        CUdeviceptr addr, unsigned long long flags)
{
    struct cli_call call = {CLI_ARGS(MEM_ADDRESS_RESERVE, .size = size, .alignment = alignment,
                                     .addr = addr, .flags = flags)};
    uint64_t out;
    CUresult res;

    if (ptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_simple(&call, &out);
    if (res == CUDA_SUCCESS)
        *ptr = (CUdeviceptr)out;
    return res;
}

CLI_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct cli_call call = {CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr, .size = size)};

    return cli_call_simple(&call, NULL);
}

CLI_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    struct cli_call call = {CLI_ARGS(MEM_CREATE, .size = size, .flags = flags), .data = prop,
                            .data_len = sizeof(*prop)};
    struct cli_handle h;
    CUresult res;

    if (handle == NULL || prop == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cli_handle_init(&h, PROTO_H_MEM_HANDLE);
    call.a.MEM_CREATE.id = h.id;
    res = cli_call_device(&call, NULL);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    if (rg_array_grow((void **)&allocs, &alloc_cap, nallocs, sizeof(*allocs), 16))
        allocs[nallocs++] = (struct vmm_alloc){h.id, size, *prop, 1};
    pthread_mutex_unlock(&vmm_lock);
    *handle = h.id;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct vmm_alloc *a;
    bool last = false;
    struct cli_call call = {CLI_ARGS(MEM_RELEASE, .handle = handle)};

    pthread_mutex_lock(&vmm_lock);
    a = alloc_find(handle);
    if (a != NULL && --a->refs == 0) {
        *a = allocs[--nallocs];
        last = true;
    }
    pthread_mutex_unlock(&vmm_lock);
    if (a == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return last ? cli_call_device(&call, NULL) : CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct cli_call call = {CLI_ARGS(MEM_MAP, .ptr = ptr, .size = size, .offset = offset,
                                     .handle = handle, .flags = flags)};
    CUresult res = cli_call_simple(&call, NULL);

    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    if (rg_array_grow((void **)&maps, &map_cap, nmaps, sizeof(*maps), 16))
        maps[nmaps++] = (struct vmm_mapping){ptr, size, handle};
    pthread_mutex_unlock(&vmm_lock);
    addr_range_add(MEM_DEVICE, (uintptr_t)ptr, size, cli_ctx_current(), 0);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct cli_call call = {CLI_ARGS(MEM_UNMAP, .ptr = ptr, .size = size)};
    CUresult res = cli_call_simple(&call, NULL);

    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nmaps;) {
        if (maps[i].va >= ptr && maps[i].va + maps[i].size <= ptr + size) {
            addr_range_remove(MEM_DEVICE, (uintptr_t)maps[i].va, NULL);
            maps[i] = maps[--nmaps];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                   size_t count)
{
    struct cli_call call = {CLI_ARGS(MEM_SET_ACCESS, .ptr = ptr, .size = size), .data = desc,
                            .data_len = count * sizeof(*desc)};

    if (desc == NULL || count == 0 || count > 64)
        return CUDA_ERROR_INVALID_VALUE;
    return cli_call_simple(&call, NULL);
}

CLI_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                   CUdeviceptr ptr)
{
    struct cli_call call = {CLI_ARGS(MEM_GET_ACCESS, .ptr = ptr), .data = location,
                            .data_len = sizeof(*location)};
    uint64_t out;
    CUresult res;

    if (flags == NULL || location == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_simple(&call, &out);
    if (res == CUDA_SUCCESS)
        *flags = out;
    return res;
}

CLI_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    struct vmm_alloc *a;

    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    a = alloc_find(handle);
    if (a != NULL)
        *prop = a->prop;
    pthread_mutex_unlock(&vmm_lock);
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CLI_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nmaps; i++) {
        struct vmm_alloc *a;
        if (p < maps[i].va || p >= maps[i].va + maps[i].size)
            continue;
        if ((a = alloc_find(maps[i].handle)) != NULL) {
            a->refs++;
            *handle = a->id;
            res = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&vmm_lock);
    return res;
}
