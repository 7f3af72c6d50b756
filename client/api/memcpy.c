/* Copies and memsets in every direction, synchronous and asynchronous, and their per-thread
 * default stream variants (_ptds / _ptsz). Host-to-device data leaves the caller's buffer
 * during the call (it is written to the connection), so asynchronous HtoD, and synchronous HtoD
 * from pageable memory, never wait.
 * Device-to-host into pinned memory completes later, at the next synchronizing call. On RDMA
 * sessions large copies of pinned memory go one-sided instead (rdma_copy.c); on TCP sessions
 * large copies go over the data lanes (lanes.c). */
#include <string.h>

#include "client/bulk/bulk.h"
#include "client/api/graph.h"
#include "client/bulk/host_mirror.h"

/* A copy with a host endpoint in pinned memory mirrored on the worker (host_mirror.h): it runs
 * there, on the mirror, in stream order with the GPU work that uses it. */
static CUresult copy_on_mirror(CUdeviceptr dst, CUdeviceptr src, size_t n, uint64_t sid, bool async)
{
    struct cli_call call = {
        CLI_ARGS(MEMCPY_DTOD, .dst = dst, .src = src, .size = n, .stream = sid, .async = async)};

    return async ? cli_call_async(&call) : cli_call_sync(&call);
}

/* A pinned host address given where the driver takes a device pointer (under unified
 * addressing it is one): the worker's mirror of it must be current. */
static void mirror_endpoint(CUdeviceptr p)
{
    if (cli_mirror_may_hold(p))
        cli_mirror_use(p);
}

/* Several servers (peer.c): true when the copy went there (its result in *res_p); else *bulk_p
 * says whether the data lanes and RDMA copies may take it (they serve the first server). */
static bool peer_copy(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev, size_t n,
                      CUstream stream, bool per_thread, bool *bulk_p, CUresult *res_p)
{
    *bulk_p = true;
    if (cli_session_count() < 2)
        return false;
    *res_p = cli_peer_copy(dst, dst_dev, src, src_dev, n, stream, per_thread);
    *bulk_p = cli_peer_bulk_ok();
    return *res_p != CLI_PEER_NOT_TAKEN;
}

static CUresult copy_htod(CUdeviceptr dst, const void *src, size_t n, CUstream stream,
                          bool per_thread, bool async)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_HTOD), .data = src, .data_len = n};
    uint64_t sid;
    bool bulk;
    CUresult res = cli_stream_arg(stream, per_thread, &sid);

    if (res != CUDA_SUCCESS || n == 0)
        return res;
    if (src == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* Captured: the graph copies from a shadow that each launch fills from src. */
    if (cli_stream_capture_id(stream) != 0)
        return cli_capture_copy(stream, sid, 0, dst, (void *)src, n);
    if (cli_mirror_holds((uintptr_t)src, n, true)) /* the GPU's bytes, not the client's */
        return copy_on_mirror(dst, (uintptr_t)src, n, sid, async);
    mirror_endpoint(dst);
    if (peer_copy(dst, true, (uintptr_t)src, false, n, stream, per_thread, &bulk, &res))
        return res;
    if (bulk && (res = cli_rdma_htod(dst, src, n, sid, async)) != CLI_RDMA_NOT_TAKEN)
        return res;
    if (bulk &&
        (res = cli_lanes_copy(true, dst, (void *)src, n, sid, async)) != CLI_LANES_NOT_TAKEN)
        return res;
    call.a.MEMCPY_HTOD.dst = dst;
    call.a.MEMCPY_HTOD.size = n;
    call.a.MEMCPY_HTOD.stream = sid;
    call.a.MEMCPY_HTOD.async = async;
    /* Synchronous from pageable memory too: the bytes have left the caller's buffer once the
     * call is written, which is all the driver promises of such a copy; a failure comes back
     * at the next synchronizing call (docs/frameworks.md). From pinned memory the driver's copy
     * is synchronous, and so is this one. */
    return async || !cli_host_pinned(src, n) ? cli_call_async(&call) : cli_call_sync(&call);
}

static CUresult copy_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream stream, bool per_thread,
                          bool async)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_DTOH), .rdata = dst, .rdata_cap = n};
    uint64_t sid;
    bool bulk;
    CUresult res = cli_stream_arg(stream, per_thread, &sid);

    if (res != CUDA_SUCCESS || n == 0)
        return res;
    if (dst == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (cli_stream_capture_id(stream) != 0)
        return cli_capture_copy(stream, sid, 1, src, dst, n);
    if (cli_mirror_holds((uintptr_t)dst, n, false) && cli_mirror_use((uintptr_t)dst))
        return copy_on_mirror((uintptr_t)dst, src, n, sid, async); /* in order with its users */
    mirror_endpoint(src);
    if (peer_copy((uintptr_t)dst, false, src, true, n, stream, per_thread, &bulk, &res))
        return res;
    if (bulk && (res = cli_rdma_dtoh(dst, src, n, sid, async)) != CLI_RDMA_NOT_TAKEN)
        return res;
    if (bulk && (res = cli_lanes_copy(false, src, dst, n, sid, async)) != CLI_LANES_NOT_TAKEN)
        return res;
    call.a.MEMCPY_DTOH.src = src;
    call.a.MEMCPY_DTOH.size = n;
    call.a.MEMCPY_DTOH.stream = sid;
    call.a.MEMCPY_DTOH.async = async;
    /* Pageable destinations make even an async copy synchronous, as in CUDA. */
    if (async && cli_host_pinned(dst, n))
        return cli_call_deferred(&call, dst, n);
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.rdata_len != n)
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

static CUresult copy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream,
                          bool per_thread, bool async)
{
    struct cli_call call = {
        CLI_ARGS(MEMCPY_DTOD, .dst = dst, .src = src, .size = n, .stream = 0, .async = async)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEMCPY_DTOD.stream);
    bool bulk;

    if (res != CUDA_SUCCESS || n == 0)
        return res;
    mirror_endpoint(dst);
    mirror_endpoint(src);
    if (peer_copy(dst, true, src, true, n, stream, per_thread, &bulk, &res))
        return res;
    return async ? cli_call_async(&call) : cli_call_sync(&call);
}

/* cuMemcpy with unified addressing: the client knows which addresses are device memory. */
static CUresult copy_any(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream,
                         bool per_thread, bool async)
{
    bool dst_dev = cli_dev_lookup(dst, NULL, NULL);
    bool src_dev = cli_dev_lookup(src, NULL, NULL);

    if (dst_dev && src_dev)
        return copy_dtod(dst, src, n, stream, per_thread, async);
    if (dst_dev)
        return copy_htod(dst, (const void *)src, n, stream, per_thread, async);
    if (src_dev)
        return copy_dtoh((void *)dst, src, n, stream, per_thread, async);
    if (n > 0 && (dst == 0 || src == 0))
        return CUDA_ERROR_INVALID_VALUE;
    /* Host to host, but the GPU may be writing one side: then on the worker, in stream order. */
    if (cli_mirror_holds(src, n, true) || cli_mirror_holds(dst, n, true))
        return copy_dtod(dst, src, n, stream, per_thread, async);
    memmove((void *)dst, (const void *)src, n);
    return CUDA_SUCCESS;
}

/* Each entry point and its per-thread twin. */
#define SYNC_PAIR(name, params, impl, ...)                                                         \
    CLI_EXPORT CUresult name params                                                                \
    {                                                                                              \
        return impl(__VA_ARGS__, NULL, false, false);                                              \
    }                                                                                              \
    CLI_EXPORT CUresult name##_ptds params                                                         \
    {                                                                                              \
        return impl(__VA_ARGS__, NULL, true, false);                                               \
    }
#define ASYNC_PAIR(name, params, impl, ...)                                                        \
    CLI_EXPORT CUresult name params                                                                \
    {                                                                                              \
        return impl(__VA_ARGS__, s, false, true);                                                  \
    }                                                                                              \
    CLI_EXPORT CUresult name##_ptsz params                                                         \
    {                                                                                              \
        return impl(__VA_ARGS__, s, true, true);                                                   \
    }

SYNC_PAIR(cuMemcpyHtoD_v2, (CUdeviceptr d, const void *h, size_t n), copy_htod, d, h, n)
SYNC_PAIR(cuMemcpyDtoH_v2, (void *h, CUdeviceptr d, size_t n), copy_dtoh, h, d, n)
SYNC_PAIR(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), copy_dtod, d, s, n)
SYNC_PAIR(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), copy_any, d, s, n)
ASYNC_PAIR(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *h, size_t n, CUstream s), copy_htod, d,
           h, n)
ASYNC_PAIR(cuMemcpyDtoHAsync_v2, (void *h, CUdeviceptr d, size_t n, CUstream s), copy_dtoh, h, d, n)
ASYNC_PAIR(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s), copy_dtod,
           d, src, n)
ASYNC_PAIR(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s), copy_any, d, src,
           n)

/* ---- memset ----------------------------------------------------------------------------- */

static CUresult memset_1d(CUdeviceptr dst, unsigned value, unsigned elemsize, size_t count,
                          CUstream stream, bool per_thread, bool async)
{
    struct cli_call call = {CLI_ARGS(MEMSET, .dst = dst, .value = value, .elemsize = elemsize,
                                     .count = count, .stream = 0, .async = async)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEMSET.stream);

    if (res != CUDA_SUCCESS || count == 0)
        return res;
    mirror_endpoint(dst); /* a pinned host target: mirrored, written there */
    return async ? cli_call_async(&call) : cli_call_sync(&call);
}

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elemsize,
                          size_t width, size_t height, CUstream stream, bool per_thread, bool async)
{
    struct cli_call call = {CLI_ARGS(MEMSET_2D, .dst = dst, .pitch = pitch, .value = value,
                                     .elemsize = elemsize, .width = width, .height = height,
                                     .stream = 0, .async = async)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEMSET_2D.stream);

    if (res != CUDA_SUCCESS || width == 0 || height == 0)
        return res;
    mirror_endpoint(dst);
    return async ? cli_call_async(&call) : cli_call_sync(&call);
}

SYNC_PAIR(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), memset_1d, d, v, 1, n)
SYNC_PAIR(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), memset_1d, d, v, 2, n)
SYNC_PAIR(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), memset_1d, d, v, 4, n)
ASYNC_PAIR(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), memset_1d, d, v,
           1, n)
ASYNC_PAIR(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), memset_1d, d,
           v, 2, n)
ASYNC_PAIR(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), memset_1d, d, v,
           4, n)
SYNC_PAIR(cuMemsetD2D8_v2, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h),
          memset_2d, d, p, v, 1, w, h)
SYNC_PAIR(cuMemsetD2D16_v2, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h),
          memset_2d, d, p, v, 2, w, h)
SYNC_PAIR(cuMemsetD2D32_v2, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h),
          memset_2d, d, p, v, 4, w, h)
ASYNC_PAIR(cuMemsetD2D8Async,
           (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s), memset_2d, d,
           p, v, 1, w, h)
ASYNC_PAIR(cuMemsetD2D16Async,
           (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s), memset_2d,
           d, p, v, 2, w, h)
ASYNC_PAIR(cuMemsetD2D32Async,
           (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s), memset_2d, d,
           p, v, 4, w, h)
