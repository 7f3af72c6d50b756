/* Several servers (docs/ARCHITECTURE.md, "Several GPUs, several servers"): copies whose device
 * memory lives on another server than the calling context's, or on two servers, and the peer
 * copy entry points. On one server every copy goes as before (cli_peer_copy is not even asked:
 * memcpy.c asks only when there are several sessions).
 *
 * A copy between two servers is relayed through the client: the source's server sends the
 * bytes here (DtoH, in its owner context), the client writes them to the destination's server
 * (HtoD), a chunk at a time. Stream order: the copy first waits for the earlier work of its
 * stream, and is complete when the call returns, so later work on the stream follows it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client/objects/address_ranges.h"
#include "client/api/api.h"

#define RELAY_CHUNK (8u << 20)

CUresult cuStreamSynchronize_ptsz(CUstream stream); /* stream.c (cuda.h names it only with
                                                     * CUDA_API_PER_THREAD_DEFAULT_STREAM) */

/* The session a context's calls go to; a NULL context is the caller's current one. */
static struct cli_session *sess_of(const struct cli_ctx *ctx)
{
    const struct cli_ctx *c = ctx != NULL ? ctx : cli_ctx_current();

    return c != NULL ? c->sess : NULL;
}

/* The context owning device memory at p (NULL: unknown to the client, so the caller's). */
static struct cli_ctx *owner_of(CUdeviceptr p)
{
    struct mem_range r;

    return addr_range_find(MEM_DEVICE, (uintptr_t)p, &r) ? r.ctx : NULL;
}

static CUresult htod_in(struct cli_ctx *ctx, CUdeviceptr dst, const void *src, size_t n)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_HTOD, .dst = dst, .size = n, .stream = 0, .async = 0),
                            .data = src, .data_len = n};

    cli_call_in(&call, ctx);
    return cli_call_sync(&call);
}

static CUresult dtoh_in(struct cli_ctx *ctx, void *dst, CUdeviceptr src, size_t n)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_DTOH, .src = src, .size = n, .stream = 0, .async = 0),
                            .rdata = dst, .rdata_cap = n};
    CUresult res;

    cli_call_in(&call, ctx);
    res = cli_call_sync(&call);
    return res == CUDA_SUCCESS && call.rdata_len != n ? CUDA_ERROR_UNKNOWN : res;
}

static CUresult dtod_in(struct cli_ctx *ctx, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_DTOD, .dst = dst, .src = src, .size = n, .async = 0)};

    cli_call_in(&call, ctx);
    return cli_call_sync(&call);
}

/* Server to server: the destination's worker listens, the source's connects to it with the
 * secret chosen here and sends (docs/ARCHITECTURE.md). CLI_PEER_NOT_TAKEN when it cannot be done
 * that way (an older server, RGPU_PEER_DIRECT=0, the source cannot reach the destination):
 * then the client relays it. */
static CUresult direct(struct cli_ctx *dctx, CUdeviceptr dst, struct cli_ctx *sctx, CUdeviceptr src,
                       size_t n)
{
    const char *env = getenv("RGPU_PEER_DIRECT"), *colon;
    uint8_t data[32 + 256];
    uint64_t port = 0;
    struct cli_call recv = {CLI_ARGS(PEER_RECV, .dst = dst, .size = n), .data = data,
                            .data_len = 32, .out = &port, .out_cap = 1};
    struct cli_call send = {CLI_ARGS(PEER_SEND, .src = src, .size = n), .data = data};
    struct cli_call wait = {CLI_ARGS(PEER_WAIT, .cancel = 0)};
    const char *server = cli_session_server(dctx->sess);
    size_t hlen =
        (colon = strrchr(server, ':')) != NULL ? (size_t)(colon - server) : strlen(server);
    CUresult res;

    if ((env != NULL && strcmp(env, "0") == 0) || hlen == 0 || hlen > 255 ||
        getrandom(data, 32, 0) != 32)
        return CLI_PEER_NOT_TAKEN;
    cli_call_in(&recv, dctx);
    if ((res = cli_call_sync(&recv)) != CUDA_SUCCESS || recv.nout < 1)
        return res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_SUCCESS ? CLI_PEER_NOT_TAKEN : res;
    memcpy(data + 32, server, hlen);
    send.a.PEER_SEND.port = port;
    send.data_len = 32 + hlen;
    cli_call_in(&send, sctx);
    res = cli_call_sync(&send);
    wait.a.PEER_WAIT.cancel = res != CUDA_SUCCESS;
    cli_call_in(&wait, dctx);
    if (res != CUDA_SUCCESS) {
        cli_call_sync(&wait);
        rg_info("server-to-server copy %s -> %s failed (%d): relayed through the client",
                cli_session_server(sctx->sess), server, (int)res);
        return res == CUDA_ERROR_NOT_READY ? CLI_PEER_NOT_TAKEN : res;
    }
    return cli_call_sync(&wait);
}

/* One server-to-server copy at a time: a worker takes one receive at a time (a second one's
 * PEER_RECV fails), and the threads of a process copying to one server at once (XLA's
 * transfer threads sharding an array over two hosts' GPUs) would otherwise lose copies. */
static pthread_mutex_t direct_lock = PTHREAD_MUTEX_INITIALIZER;

/* Device to device between two servers: server to server, else through a buffer here. */
static CUresult relay(struct cli_ctx *dctx, CUdeviceptr dst, struct cli_ctx *sctx, CUdeviceptr src,
                      size_t n)
{
    size_t chunk = n < RELAY_CHUNK ? n : RELAY_CHUNK;
    CUresult res;
    uint8_t *buf;

    pthread_mutex_lock(&direct_lock);
    res = direct(dctx, dst, sctx, src, n);
    pthread_mutex_unlock(&direct_lock);

    if (res != CLI_PEER_NOT_TAKEN)
        return res;
    if ((buf = malloc(chunk ? chunk : 1)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = CUDA_SUCCESS;
    for (size_t off = 0; off < n && res == CUDA_SUCCESS; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        res = dtoh_in(sctx, buf, src + off, len);
        if (res == CUDA_SUCCESS)
            res = htod_in(dctx, dst + off, buf, len);
    }
    free(buf);
    return res;
}

/* Wait for the earlier work of the copy's stream (none for a synchronous copy on the NULL
 * stream: every call of the caller's session before it is done when its first call returns,
 * and the other session's calls are ordered on that session). */
static CUresult stream_wait(CUstream stream, bool per_thread)
{
    if (stream == NULL && !per_thread)
        return cuCtxSynchronize();
    return per_thread ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
}

/* A copy between the given contexts' memory (NULL context: host memory for that side), in
 * stream order. */
static CUresult copy_between(struct cli_ctx *dctx, CUdeviceptr dst, struct cli_ctx *sctx,
                             CUdeviceptr src, size_t n, CUstream stream, bool per_thread)
{
    CUresult res = stream_wait(stream, per_thread);

    if (res != CUDA_SUCCESS || n == 0)
        return res;
    if (dctx != NULL && sctx != NULL)
        return dctx->sess == sctx->sess ? dtod_in(sctx, dst, src, n)
                                        : relay(dctx, dst, sctx, src, n);
    if (dctx != NULL)
        return htod_in(dctx, dst, (const void *)src, n);
    if (sctx != NULL)
        return dtoh_in(sctx, (void *)dst, src, n);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cli_peer_copy(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev, size_t n,
                       CUstream stream, bool per_thread)
{
    struct cli_ctx *cur = cli_ctx_current();
    struct cli_ctx *dctx = dst_dev ? owner_of(dst) : NULL;
    struct cli_ctx *sctx = src_dev ? owner_of(src) : NULL;

    if (cur == NULL ||
        ((dctx == NULL || dctx->sess == cur->sess) && (sctx == NULL || sctx->sess == cur->sess)))
        return CLI_PEER_NOT_TAKEN;
    return copy_between(dst_dev ? (dctx ? dctx : cur) : NULL, dst,
                        src_dev ? (sctx ? sctx : cur) : NULL, src, n, stream, per_thread);
}

bool cli_peer_bulk_ok(void)
{
    return cli_session_is_first(sess_of(NULL));
}

/* ---- cuMemcpyPeer ----------------------------------------------------------------------- */

static CUresult copy_peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                          size_t n, CUstream stream, bool per_thread, bool async)
{
    struct cli_ctx *d = cli_handle_check(dst_ctx, PROTO_H_CTX);
    struct cli_ctx *s = cli_handle_check(src_ctx, PROTO_H_CTX);
    struct cli_call call = {
        CLI_ARGS(MEMCPY_DTOD, .dst = dst, .src = src, .size = n, .async = async)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (d == NULL || s == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Same server, in the caller's session: the driver's own peer copy, stream-ordered there. */
    if (d->sess == s->sess && s->sess == sess_of(NULL)) {
        if ((res = cli_stream_arg(stream, per_thread, &call.a.MEMCPY_DTOD.stream)) != CUDA_SUCCESS)
            return res;
        return async ? cli_call_async(&call) : cli_call_sync(&call);
    }
    return copy_between(d, dst, s, src, n, stream, per_thread);
}

CLI_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                 size_t n)
{
    return copy_peer(dst, dc, src, sc, n, NULL, false, false);
}

CLI_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                      size_t n)
{
    return copy_peer(dst, dc, src, sc, n, NULL, true, false);
}

CLI_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                      size_t n, CUstream stream)
{
    return copy_peer(dst, dc, src, sc, n, stream, false, true);
}

CLI_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src,
                                           CUcontext sc, size_t n, CUstream stream)
{
    return copy_peer(dst, dc, src, sc, n, stream, true, true);
}

/* ---- events across servers --------------------------------------------------------------- */

CUresult cli_peer_wait_event(struct cli_ctx *stream_ctx, struct cli_ctx *event_ctx, CUevent event)
{
    if (event_ctx == NULL || sess_of(stream_ctx) == event_ctx->sess)
        return CLI_PEER_NOT_TAKEN;
    /* The stream's server cannot see the event: the client waits for it instead (the stream's
     * later work is sent after it has completed). */
    return cuEventSynchronize(event);
}

/* ---- peer access ------------------------------------------------------------------------- */

/* What a device pair's server says of peer access (P2P_QUERY), asked once per pair: [0] can
 * access, [1..4] the P2P attributes PERFORMANCE_RANK .. CUDA_ARRAY_ACCESS_SUPPORTED. Devices of
 * two servers are never peers; nor is a device its own; a server too old to be asked says no. */
#define P2P_CACHED_DEVICES 32
#define P2P_ANSWERS        5
static struct {
    bool known;
    int v[P2P_ANSWERS];
} p2p_cache[P2P_CACHED_DEVICES][P2P_CACHED_DEVICES];
static pthread_mutex_t p2p_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult p2p_ask(int src, int dst, int v[P2P_ANSWERS])
{
    uint64_t out[P2P_ANSWERS] = {0};
    struct cli_call call = {CLI_ARGS(P2P_QUERY, .src = (uint64_t)cli_device_remote(src),
                                     .dst = (uint64_t)cli_device_remote(dst)),
                            .out = out, .out_cap = P2P_ANSWERS, .sess = cli_device_session(src)};
    CUresult res = cli_call_sync(&call);

    if (res == CUDA_ERROR_NOT_SUPPORTED) /* an older server */
        res = CUDA_SUCCESS;
    for (unsigned i = 0; i < P2P_ANSWERS; i++)
        v[i] = i < call.nout ? (int)(int64_t)out[i] : 0;
    return res;
}

static CUresult p2p_answers(int src, int dst, int v[P2P_ANSWERS])
{
    bool cacheable = src < P2P_CACHED_DEVICES && dst < P2P_CACHED_DEVICES;
    CUresult res = CUDA_SUCCESS;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cli_device(src) == NULL || cli_device(dst) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    memset(v, 0, P2P_ANSWERS * sizeof(int));
    if (src == dst || cli_device_session(src) != cli_device_session(dst))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&p2p_lock);
    if (cacheable && p2p_cache[src][dst].known) {
        memcpy(v, p2p_cache[src][dst].v, P2P_ANSWERS * sizeof(int));
    } else if ((res = p2p_ask(src, dst, v)) == CUDA_SUCCESS && cacheable) {
        memcpy(p2p_cache[src][dst].v, v, P2P_ANSWERS * sizeof(int));
        p2p_cache[src][dst].known = true;
    }
    pthread_mutex_unlock(&p2p_lock);
    return res;
}

CLI_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    int v[P2P_ANSWERS];
    CUresult res;

    if (canAccessPeer == NULL)
        return cli_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if ((res = p2p_answers(dev, peerDev, v)) == CUDA_SUCCESS)
        *canAccessPeer = v[0];
    return res;
}

CLI_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src,
                                            CUdevice dst)
{
    int v[P2P_ANSWERS];
    CUresult res;

    if (value == NULL || attrib < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
        attrib > CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED)
        return cli_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if (src == dst && cli_device(src) != NULL)
        return CUDA_ERROR_INVALID_DEVICE; /* as the driver: a device is not its own peer */
    if ((res = p2p_answers(src, dst, v)) == CUDA_SUCCESS)
        *value = v[attrib];
    return res;
}

/* In the driver of the server both contexts are on; contexts of two servers never reach each
 * other's memory. */
static CUresult peer_access(CUcontext peer_ctx, unsigned flags, bool enable)
{
    struct cli_ctx *cur = cli_ctx_current(), *peer = cli_handle_check(peer_ctx, PROTO_H_CTX);
    struct cli_call call = {CLI_ARGS(CTX_PEER_ACCESS, .enable = enable, .flags = flags)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (peer == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (peer->sess != cur->sess)
        return enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    call.a.CTX_PEER_ACCESS.peer = peer->h.id;
    res = cli_call_sync(&call);
    if (res == CUDA_ERROR_NOT_SUPPORTED) /* an older server: as before, no peers */
        res = enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    return res;
}

CLI_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    return peer_access(peerContext, Flags, true);
}

CLI_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    return peer_access(peerContext, 0, false);
}

/* ---- cuMemcpy3DPeer ----------------------------------------------------------------------- */

CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c); /* memcpy_2d.c (cuda.h names them only */
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s); /* per thread) */

/* The context one end of a peer copy lives in: the array's for an array, the given one for
 * device memory, the owner's for a unified address of device memory; NULL for host memory. */
static CUresult end_ctx(CUmemorytype type, CUdeviceptr dev, CUarray array, CUcontext given,
                        struct cli_ctx **ctx_p)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        *ctx_p = NULL;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
        *ctx_p = owner_of(dev);
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        *ctx_p = cli_array_ctx(array);
        break;
    case CU_MEMORYTYPE_DEVICE:
        *ctx_p = cli_handle_check(given, PROTO_H_CTX);
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return *ctx_p != NULL                ? CUDA_SUCCESS
           : type == CU_MEMORYTYPE_ARRAY ? CUDA_ERROR_INVALID_HANDLE
                                         : CUDA_ERROR_INVALID_CONTEXT;
}

static CUDA_MEMCPY3D plain_3d(const CUDA_MEMCPY3D_PEER *p)
{
    return (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes,
                           .srcY = p->srcY,
                           .srcZ = p->srcZ,
                           .srcLOD = p->srcLOD,
                           .srcMemoryType = p->srcMemoryType,
                           .srcHost = p->srcHost,
                           .srcDevice = p->srcDevice,
                           .srcArray = p->srcArray,
                           .srcPitch = p->srcPitch,
                           .srcHeight = p->srcHeight,
                           .dstXInBytes = p->dstXInBytes,
                           .dstY = p->dstY,
                           .dstZ = p->dstZ,
                           .dstLOD = p->dstLOD,
                           .dstMemoryType = p->dstMemoryType,
                           .dstHost = p->dstHost,
                           .dstDevice = p->dstDevice,
                           .dstArray = p->dstArray,
                           .dstPitch = p->dstPitch,
                           .dstHeight = p->dstHeight,
                           .WidthInBytes = p->WidthInBytes,
                           .Height = p->Height,
                           .Depth = p->Depth};
}

/* A synchronous 3D copy in context ctx, made current for it when it is not. */
static CUresult copy_3d_in(struct cli_ctx *ctx, const CUDA_MEMCPY3D *c)
{
    CUcontext popped;
    CUresult res;

    if (ctx == NULL || ctx == cli_ctx_current())
        return cuMemcpy3D(c);
    if ((res = cuCtxPushCurrent((CUcontext)ctx)) != CUDA_SUCCESS)
        return res;
    res = cuMemcpy3D(c);
    cuCtxPopCurrent(&popped);
    return res;
}

/* Ends on two servers: slabs of whole slices through a buffer here, each out of the source's
 * server into the buffer and from it into the destination's (about RELAY_CHUNK a slab, at least
 * one slice). */
static CUresult relay_3d(struct cli_ctx *dctx, struct cli_ctx *sctx, const CUDA_MEMCPY3D *c)
{
    size_t w = c->WidthInBytes, h = c->Height ? c->Height : 1, depth = c->Depth ? c->Depth : 1;
    size_t slice = w * h, per = slice == 0 || slice >= RELAY_CHUNK ? 1 : RELAY_CHUNK / slice;
    CUresult res = CUDA_SUCCESS;
    uint8_t *buf;

    if (slice == 0)
        return CUDA_SUCCESS;
    per = per < depth ? per : depth;
    if ((buf = malloc(per * slice)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t z = 0; z < depth && res == CUDA_SUCCESS; z += per) {
        CUDA_MEMCPY3D out = *c, in = *c;
        out.Depth = in.Depth = depth - z < per ? depth - z : per;
        out.Height = in.Height = h;
        out.srcZ += z;
        out.dstMemoryType = CU_MEMORYTYPE_HOST, out.dstHost = buf, out.dstPitch = w;
        out.dstHeight = h, out.dstXInBytes = out.dstY = out.dstZ = 0;
        in.dstZ += z;
        in.srcMemoryType = CU_MEMORYTYPE_HOST, in.srcHost = buf, in.srcPitch = w;
        in.srcHeight = h, in.srcXInBytes = in.srcY = in.srcZ = 0;
        res = copy_3d_in(sctx, &out);
        if (res == CUDA_SUCCESS)
            res = copy_3d_in(dctx, &in);
    }
    free(buf);
    return res;
}

/* Ends on the caller's server: the driver's copy there, on the caller's stream. Ends on one
 * other server: its driver's, after the stream's earlier work. Ends on two servers: relayed, in
 * stream order likewise (complete on return). */
static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream stream, bool per_thread,
                             bool async)
{
    struct cli_ctx *sctx, *dctx, *cur = cli_ctx_current();
    CUDA_MEMCPY3D c;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = end_ctx(p->srcMemoryType, p->srcDevice, p->srcArray, p->srcContext, &sctx)) !=
            CUDA_SUCCESS ||
        (res = end_ctx(p->dstMemoryType, p->dstDevice, p->dstArray, p->dstContext, &dctx)) !=
            CUDA_SUCCESS)
        return res;
    c = plain_3d(p);
    if ((sctx == NULL || sctx->sess == cur->sess) && (dctx == NULL || dctx->sess == cur->sess)) {
        if (async)
            return per_thread ? cuMemcpy3DAsync_v2_ptsz(&c, stream) : cuMemcpy3DAsync(&c, stream);
        return per_thread ? cuMemcpy3D_v2_ptds(&c) : cuMemcpy3D(&c);
    }
    if ((res = stream_wait(stream, per_thread)) != CUDA_SUCCESS)
        return res;
    if (sctx == NULL || dctx == NULL || sctx->sess == dctx->sess)
        return copy_3d_in(dctx != NULL ? dctx : sctx, &c);
    return relay_3d(dctx, sctx, &c);
}

CLI_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
    return copy_3d_peer(p, NULL, false, false);
}

CLI_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p)
{
    return copy_3d_peer(p, NULL, true, false);
}

CLI_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream stream)
{
    return copy_3d_peer(p, stream, false, true);
}

CLI_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream stream)
{
    return copy_3d_peer(p, stream, true, true);
}
