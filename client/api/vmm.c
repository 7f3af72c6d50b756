/* Virtual memory management: address reservations, physical allocations and their mappings
 * live on the server; the client mints the allocation handles (so cuMemGetAllocation-
 * PropertiesFromHandle and cuMemRetainAllocationHandle are answered here) and records mapped
 * ranges as device memory, so copies and pointer queries on them work like on cuMemAlloc'd
 * memory. Every call waits for its reply: each can fail (out of memory, bad range) and callers
 * such as PyTorch's expandable segments act on the error at once. Granularity queries and
 * physical allocations belong to a device and, as natively, need no current context
 * (cuda-samples' memMapIPCDrv asks after destroying its contexts).
 * Several servers (docs/ARCHITECTURE.md): physical memory lives on its device's server (device
 * ordinals in the structures sent are that server's); a reservation lives on the server of the
 * context current at cuMemAddressReserve, and is kept disjoint from every address the client
 * knows on the other servers (reserved or allocated) as allocations are; mappings, access and
 * unmapping go to the reservation's server, which must be the memory's. */
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "client/objects/address_ranges.h"
#include "client/api/api.h"

struct vmm_alloc {
    uint64_t id; /* the CUmemGenericAllocationHandle the application holds */
    size_t size;
    CUmemAllocationProp prop;
    unsigned refs;            /* 1 + cuMemRetainAllocationHandle calls not yet released */
    struct cli_session *sess; /* its device's server (NULL: the caller's) */
};

struct vmm_mapping {
    CUdeviceptr va;
    size_t size;
    uint64_t handle;
};

#define DISJOINT_RESERVE_TRIES 64

struct vmm_resv {
    CUdeviceptr va;
    size_t size;
    struct cli_session *sess;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_alloc *allocs;
static size_t nallocs, alloc_cap;
static struct vmm_mapping *maps;
static size_t nmaps, map_cap;
static struct vmm_resv *resvs;
static size_t nresvs, resv_cap;

/* The reservation containing [va, va + size); NULL if none. Lock held. */
static struct vmm_resv *resv_find(CUdeviceptr va, size_t size)
{
    for (size_t i = 0; i < nresvs; i++)
        if (va >= resvs[i].va && va - resvs[i].va + size <= resvs[i].size)
            return &resvs[i];
    return NULL;
}

bool cli_vmm_reserved_overlaps(CUdeviceptr va, size_t size)
{
    bool hit = false;

    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nresvs && !hit; i++)
        hit = va < resvs[i].va + resvs[i].size && resvs[i].va < va + size;
    pthread_mutex_unlock(&vmm_lock);
    return hit;
}

/* The session of the reservation holding [va, va + size): its server does what concerns the
 * range (NULL, the caller's, when the client knows no such reservation). */
static struct cli_session *resv_session(CUdeviceptr va, size_t size)
{
    struct vmm_resv *r;
    struct cli_session *s;

    pthread_mutex_lock(&vmm_lock);
    r = resv_find(va, size ? size : 1);
    s = r != NULL ? r->sess : NULL;
    pthread_mutex_unlock(&vmm_lock);
    return s;
}

/* A location of type DEVICE in the client's ordinals, made its server's; the server in
 * *sess_p (left alone for other types). False if the device does not exist. */
static bool location_remote(CUmemLocation *loc, struct cli_session **sess_p)
{
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return true;
    if ((*sess_p = cli_device_session(loc->id)) == NULL)
        return false;
    loc->id = cli_device_remote(loc->id);
    return true;
}

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
    CUmemAllocationProp remote;
    struct cli_call call = {CLI_ARGS(MEM_GET_GRANULARITY, .option = option), .data = &remote,
                            .data_len = sizeof(remote)};
    uint64_t out;
    CUresult res;

    if (g == NULL || prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    remote = *prop;
    if (!location_remote(&remote.location, &call.sess))
        return CUDA_ERROR_INVALID_DEVICE;
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
    uint64_t out, kept[DISJOINT_RESERVE_TRIES];
    struct cli_ctx *cur = cli_ctx_current();
    int nkept = 0;
    CUresult res;

    if (ptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* As alloc_disjoint (memory.c): an answer overlapping what the client knows of another
     * server is kept aside and asked again, then the kept ones are freed. */
    while ((res = cli_call_simple(&call, &out)) == CUDA_SUCCESS && cli_session_count() > 1 &&
           (addr_range_overlaps(MEM_DEVICE, (uintptr_t)out, size) ||
            cli_vmm_reserved_overlaps((CUdeviceptr)out, size))) {
        if (nkept == DISJOINT_RESERVE_TRIES) {
            rg_error("address reservation: %d answers in a row overlap other devices' addresses",
                     nkept);
            res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        kept[nkept++] = out;
        call.nout = 0;
    }
    for (int i = 0; i < nkept; i++)
        (void)cli_call_simple(
            &(struct cli_call){CLI_ARGS(MEM_ADDRESS_FREE, .ptr = kept[i], .size = size)}, NULL);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    if (rg_array_grow((void **)&resvs, &resv_cap, nresvs, sizeof(*resvs), 16))
        resvs[nresvs++] = (struct vmm_resv){(CUdeviceptr)out, size, cur ? cur->sess : NULL};
    pthread_mutex_unlock(&vmm_lock);
    *ptr = (CUdeviceptr)out;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct cli_call call = {CLI_ARGS(MEM_ADDRESS_FREE, .ptr = ptr, .size = size),
                            .sess = resv_session(ptr, size)};
    CUresult res = cli_call_simple(&call, NULL);

    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; res == CUDA_SUCCESS && i < nresvs; i++)
        if (resvs[i].va == ptr) {
            resvs[i] = resvs[--nresvs];
            break;
        }
    pthread_mutex_unlock(&vmm_lock);
    return res;
}

CLI_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUmemAllocationProp remote;
    struct cli_call call = {CLI_ARGS(MEM_CREATE, .size = size, .flags = flags), .data = &remote,
                            .data_len = sizeof(remote)};
    struct cli_handle h;
    CUresult res;

    if (handle == NULL || prop == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    remote = *prop;
    if (!location_remote(&remote.location, &call.sess))
        return CUDA_ERROR_INVALID_DEVICE;
    cli_handle_init(&h, PROTO_H_MEM_HANDLE);
    call.a.MEM_CREATE.id = h.id;
    res = cli_call_device(&call, NULL);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    if (rg_array_grow((void **)&allocs, &alloc_cap, nallocs, sizeof(*allocs), 16))
        allocs[nallocs++] = (struct vmm_alloc){h.id, size, *prop, 1, call.sess};
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
    if (a != NULL)
        call.sess = a->sess;
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
                                     .handle = handle, .flags = flags),
                            .sess = resv_session(ptr, size)};
    struct cli_ctx *owner = cli_ctx_current();
    struct vmm_alloc *a;
    CUresult res;

    pthread_mutex_lock(&vmm_lock);
    a = alloc_find(handle);
    if (a != NULL && call.sess == NULL)
        call.sess = a->sess;
    res = a != NULL && a->sess != NULL && a->sess != call.sess ? CUDA_ERROR_NOT_SUPPORTED
                                                               : CUDA_SUCCESS;
    /* The mapped memory is its device's: pointer attributes name that device. */
    if (a != NULL && a->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
        (owner == NULL || owner->device != a->prop.location.id))
        owner = cli_primary_ctx(a->prop.location.id);
    pthread_mutex_unlock(&vmm_lock);
    if (res != CUDA_SUCCESS) {
        rg_info("cuMemMap: device memory of one server into a reservation of another: refused");
        return res;
    }
    if ((res = cli_call_simple(&call, NULL)) != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&vmm_lock);
    if (rg_array_grow((void **)&maps, &map_cap, nmaps, sizeof(*maps), 16))
        maps[nmaps++] = (struct vmm_mapping){ptr, size, handle};
    pthread_mutex_unlock(&vmm_lock);
    addr_range_add(MEM_DEVICE, (uintptr_t)ptr, size, owner, 0);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct cli_call call = {CLI_ARGS(MEM_UNMAP, .ptr = ptr, .size = size),
                            .sess = resv_session(ptr, size)};
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
    CUmemAccessDesc remote[64];
    struct cli_call call = {CLI_ARGS(MEM_SET_ACCESS, .ptr = ptr, .size = size), .data = remote,
                            .data_len = count * sizeof(*desc), .sess = resv_session(ptr, size)};

    if (desc == NULL || count == 0 || count > 64)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        struct cli_session *dev_sess = call.sess;
        remote[i] = desc[i];
        if (!location_remote(&remote[i].location, &dev_sess))
            return CUDA_ERROR_INVALID_DEVICE;
        if (call.sess != NULL && dev_sess != call.sess)
            return CUDA_ERROR_NOT_SUPPORTED; /* another server's device cannot reach it */
        call.sess = dev_sess;
    }
    return cli_call_simple(&call, NULL);
}

CLI_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                   CUdeviceptr ptr)
{
    CUmemLocation remote;
    struct cli_call call = {CLI_ARGS(MEM_GET_ACCESS, .ptr = ptr), .data = &remote,
                            .data_len = sizeof(remote), .sess = resv_session(ptr, 1)};
    struct cli_session *dev_sess = call.sess;
    uint64_t out;
    CUresult res;

    if (flags == NULL || location == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    remote = *location;
    if (!location_remote(&remote, &dev_sess))
        return CUDA_ERROR_INVALID_DEVICE;
    if (call.sess != NULL && dev_sess != call.sess) { /* another server's device: no access */
        *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        return CUDA_SUCCESS;
    }
    call.sess = dev_sess;
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
