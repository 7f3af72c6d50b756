/* Device memory (allocated on the server), pinned host memory (client-local: the GPU is on
 * another host, so "pinned" means the client may complete copies into it asynchronously) and
 * pointer attributes answered from the client's own records. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client/objects/address_ranges.h"
#include "client/api/api.h"
#include "client/bulk/bulk.h"
#include "client/bulk/host_mirror.h"

/* Unified addresses across servers (docs/ARCHITECTURE.md, "Several servers"): each server's
 * driver picks addresses on its own, so with several sessions an allocation that overlaps one
 * the client already knows (another device's) is kept aside and asked for again, until the
 * answer is disjoint; those kept aside are then freed. One server: the first answer stands. */
#define DISJOINT_TRIES 64
static pthread_mutex_t disjoint_lock = PTHREAD_MUTEX_INITIALIZER;

/* The size of the allocation an alloc call's reply names (height: MEM_ALLOC_PITCH's rows). */
static size_t alloc_size(const uint64_t *out, size_t size, size_t height)
{
    return height ? (size_t)out[1] * height : size;
}

static CUresult alloc_disjoint(struct cli_call *call, uint64_t *out, size_t size, size_t height,
                               unsigned flags)
{
    uint64_t kept[DISJOINT_TRIES];
    int nkept = 0;
    CUresult res;

    if (cli_session_count() > 1)
        pthread_mutex_lock(&disjoint_lock);
    for (;;) {
        call->nout = 0;
        res = cli_call_sync(call);
        if (res == CUDA_SUCCESS && call->nout < (height ? 2u : 1u))
            res = CUDA_ERROR_UNKNOWN;
        if (res != CUDA_SUCCESS || cli_session_count() < 2 ||
            (!addr_range_overlaps(MEM_DEVICE, (uintptr_t)out[0], alloc_size(out, size, height)) &&
             !cli_vmm_reserved_overlaps(out[0], alloc_size(out, size, height))))
            break;
        if (nkept == DISJOINT_TRIES) {
            rg_error("device memory: %d allocations in a row overlap other devices' addresses",
                     DISJOINT_TRIES);
            res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        kept[nkept++] = out[0];
    }
    if (res == CUDA_SUCCESS)
        addr_range_add(MEM_DEVICE, (uintptr_t)out[0], alloc_size(out, size, height),
                       cli_ctx_current(), flags);
    if (cli_session_count() > 1)
        pthread_mutex_unlock(&disjoint_lock);
    /* MEM_FREE answers (it is not `noreply` in ops.def): freed one by one, waiting. */
    for (int i = 0; i < nkept; i++)
        (void)cli_call_sync(&(struct cli_call){CLI_ARGS(MEM_FREE, .dptr = kept[i])});
    if (res == CUDA_SUCCESS && nkept > 0)
        rg_debug("device memory: %d overlapping allocation(s) skipped", nkept);
    return res;
}

CLI_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(MEM_ALLOC, .size = bytesize), .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = alloc_disjoint(&call, out, bytesize, 0, MEM_DEV_LEGACY_IPC)) != CUDA_SUCCESS)
        return res;
    *dptr = (CUdeviceptr)out[0];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                    unsigned int elemsize)
{
    uint64_t out[2];
    struct cli_call call = {
        CLI_ARGS(MEM_ALLOC_PITCH, .width = width, .height = height, .elemsize = elemsize),
        .out = out, .out_cap = 2};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (dptr == NULL || pitch == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = alloc_disjoint(&call, out, 0, height, MEM_DEV_LEGACY_IPC)) != CUDA_SUCCESS)
        return res;
    *dptr = (CUdeviceptr)out[0];
    *pitch = (size_t)out[1];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemFree(CUdeviceptr dptr)
{
    struct cli_call call = {CLI_ARGS(MEM_FREE, .dptr = dptr)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr == 0)
        return CUDA_SUCCESS;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS)
        addr_range_remove(MEM_DEVICE, (uintptr_t)dptr, NULL);
    return res;
}

CLI_EXPORT CUresult cuMemGetInfo(size_t *free_p, size_t *total_p)
{
    uint64_t out[2];
    struct cli_call call = {.op = PROTO_OP_MEM_GET_INFO, .out = out, .out_cap = 2};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (free_p == NULL || total_p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout >= 2) {
        *free_p = (size_t)out[0];
        *total_p = (size_t)out[1];
    }
    return res;
}

CLI_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct mem_range r;

    if (!addr_range_find(MEM_DEVICE, (uintptr_t)dptr, &r))
        return CUDA_ERROR_NOT_FOUND;
    if (pbase != NULL)
        *pbase = (CUdeviceptr)r.base;
    if (psize != NULL)
        *psize = r.size;
    return CUDA_SUCCESS;
}

/* ---- host memory ------------------------------------------------------------------------ */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_READ  22 /* Linux 5.14 */
#define MADV_POPULATE_WRITE 23
#endif

/* Page-locked memory is resident: fault it in now (contents kept), as pinning does, so the first
 * copy into it does not pay a page fault per page. Best effort on older kernels. */
static void prefault(void *p, size_t len, bool read_only)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;

    madvise((void *)a, len + ((uintptr_t)p - a),
            read_only ? MADV_POPULATE_READ : MADV_POPULATE_WRITE);
}

/* Internal flags of a host range beside the application's: made by cuMemHostAlloc, and mapped
 * by host_mirror.c (else from the heap). */
#define HOST_ALLOC  0x80000000u
#define HOST_MAPPED 0x40000000u

CLI_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    bool mapped;
    void *p;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pp == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p = cli_mirror_host_alloc(bytesize, &mapped)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!addr_range_add(MEM_HOST, (uintptr_t)p, bytesize, NULL,
                        flags | HOST_ALLOC | (mapped ? HOST_MAPPED : 0))) {
        cli_mirror_host_free(p, bytesize, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    prefault(p, bytesize, false);
    cli_mirror_host_added((uintptr_t)p, bytesize);
    *pp = p;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemAllocHost(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CLI_EXPORT CUresult cuMemFreeHost(void *p)
{
    struct mem_range r;

    if (!addr_range_find(MEM_HOST, (uintptr_t)p, &r) || r.base != (uintptr_t)p ||
        !(r.flags & HOST_ALLOC))
        return CUDA_ERROR_INVALID_VALUE;
    cli_mirror_forget((uintptr_t)p);
    addr_range_remove(MEM_HOST, (uintptr_t)p, &r);
    cli_rdma_forget(r.mr);
    cli_lanes_quiesce();
    cli_mirror_host_free(p, r.size, r.flags & HOST_MAPPED);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
    struct mem_range r;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (p == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (addr_range_find(MEM_HOST, (uintptr_t)p, &r))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (!addr_range_add(MEM_HOST, (uintptr_t)p, bytesize, NULL, flags))
        return CUDA_ERROR_OUT_OF_MEMORY;
    prefault(p, bytesize, flags & CU_MEMHOSTREGISTER_READ_ONLY);
    cli_mirror_host_added((uintptr_t)p, bytesize);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemHostUnregister(void *p)
{
    struct mem_range r;

    if (!addr_range_find(MEM_HOST, (uintptr_t)p, &r) || r.base != (uintptr_t)p ||
        (r.flags & HOST_ALLOC))
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    cli_mirror_forget((uintptr_t)p);
    addr_range_remove(MEM_HOST, (uintptr_t)p, &r);
    cli_rdma_forget(r.mr);
    cli_lanes_quiesce();
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    struct mem_range r;

    if (flags == NULL || !addr_range_find(MEM_HOST, (uintptr_t)p, &r))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = r.flags & ~(HOST_ALLOC | HOST_MAPPED);
    return CUDA_SUCCESS;
}

/* Unified addressing: a pinned buffer's device address is its host address. GPU work that
 * uses it gets it mirrored on the worker at that address (host_mirror.c). */
CLI_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pdptr == NULL || flags != 0 || !cli_host_pinned(p, 1))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ---- pointer attributes ----------------------------------------------------------------- */

static CUresult host_attribute(void *data, CUpointer_attribute attr, const struct mem_range *r,
                               uintptr_t p)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = (void *)p;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(void **)data = (void *)r->base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = r->size;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = r->buffer_id;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = -1;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult device_attribute(void *data, CUpointer_attribute attr, const struct mem_range *r,
                                 uintptr_t p)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = (CUcontext)r->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(int *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = r->buffer_id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = r->ctx ? r->ctx->device : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)r->base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = r->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned *)data = (r->flags & MEM_DEV_LEGACY_IPC) != 0;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    struct mem_range r;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (addr_range_find(MEM_DEVICE, (uintptr_t)ptr, &r))
        return device_attribute(data, attr, &r, (uintptr_t)ptr);
    if (addr_range_find(MEM_HOST, (uintptr_t)ptr, &r))
        return host_attribute(data, attr, &r, (uintptr_t)ptr);
    return CUDA_ERROR_INVALID_VALUE;
}

/* Unknown pointers are not an error here: their attributes read as zero / unregistered. */
CLI_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                           CUdeviceptr ptr)
{
    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (attrs == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (data[i] == NULL)
            continue;
        if (cuPointerGetAttribute(data[i], attrs[i], ptr) != CUDA_SUCCESS) {
            if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
                *(int *)data[i] = -2;
            else if (attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
                     attrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
                     attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                     attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                     attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                     attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT)
                *(uint64_t *)data[i] = 0;
            else
                *(unsigned *)data[i] = 0;
        }
    }
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ---------------------------------------------------------- */

/* The pointer is needed at once, so the allocation round-trips; the free does not wait. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream, bool per_thread)
{
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(MEM_ALLOC_ASYNC, .size = size), .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (dptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_stream_id(stream, per_thread, &call.a.MEM_ALLOC_ASYNC.stream))
        return CUDA_ERROR_INVALID_HANDLE;
    res = alloc_disjoint(&call, out, size, 0, 0);
    if (res == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)out[0];
    return res;
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread)
{
    struct cli_call call = {CLI_ARGS(MEM_FREE_ASYNC, .dptr = dptr)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEM_FREE_ASYNC.stream);

    if (res != CUDA_SUCCESS)
        return res;
    addr_range_remove(MEM_DEVICE, (uintptr_t)dptr, NULL);
    return cli_call_async(&call);
}

CLI_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s)
{
    return alloc_async(d, n, s, false);
}
CLI_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s)
{
    return alloc_async(d, n, s, true);
}
CLI_EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s)
{
    return free_async(d, s, false);
}
CLI_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s)
{
    return free_async(d, s, true);
}
