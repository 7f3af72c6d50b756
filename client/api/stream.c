/* Streams. Creation and destruction mint or drop ids locally and do not wait; waits on events
 * are asynchronous; synchronize and query round-trip. */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

struct cli_stream {
    struct cli_handle h;
    struct cli_ctx *ctx;
    unsigned flags;
    int priority;
    uint64_t capture_id; /* non-zero while the stream is capturing (graph.c) */
};

static struct cli_stream *stream_object(CUstream stream, CUresult *res_p);

bool cli_stream_set_capture(CUstream stream, uint64_t capture_id)
{
    struct cli_stream *s = cli_handle_check(stream, PROTO_H_STREAM);

    if (s == NULL)
        return false;
    s->capture_id = capture_id;
    return true;
}

uint64_t cli_stream_capture_id(CUstream stream)
{
    struct cli_stream *s = cli_handle_check(stream, PROTO_H_STREAM);

    return s != NULL ? s->capture_id : 0;
}

bool cli_stream_id(CUstream stream, bool per_thread, uint64_t *id_p)
{
    struct cli_stream *s;

    if (stream == NULL) {
        *id_p = per_thread ? PROTO_STREAM_PER_THREAD : PROTO_STREAM_NULL;
        return true;
    }
    if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
        *id_p = stream == CU_STREAM_LEGACY ? PROTO_STREAM_LEGACY : PROTO_STREAM_PER_THREAD;
        return true;
    }
    if ((s = cli_handle_check(stream, PROTO_H_STREAM)) == NULL)
        return false;
    *id_p = s->h.id;
    return true;
}

CUresult cli_stream_arg(CUstream stream, bool per_thread, uint64_t *id_p)
{
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    return cli_stream_id(stream, per_thread, id_p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
    struct cli_stream *s;
    struct cli_call call = {CLI_ARGS(STREAM_CREATE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (ph == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&s->h, PROTO_H_STREAM);
    s->ctx = cli_ctx_current();
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    call.a.STREAM_CREATE.id = s->h.id;
    call.a.STREAM_CREATE.flags = flags;
    call.a.STREAM_CREATE.priority = (uint64_t)(int64_t)priority;
    res = cli_call_async(&call);
    if (res != CUDA_SUCCESS) {
        free(s);
        return res;
    }
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
    return stream_create(ph, flags, 0);
}

CLI_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    return stream_create(ph, flags, priority);
}

CLI_EXPORT CUresult cuStreamDestroy(CUstream stream)
{
    struct cli_stream *s = cli_handle_check(stream, PROTO_H_STREAM);

    if (s == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return cli_handle_destroy(&s->h, PROTO_OP_STREAM_DESTROY, s->ctx);
}

CLI_EXPORT CUresult cli_cuStreamDestroy_v1(CUstream s) __asm__("cuStreamDestroy");
CLI_EXPORT CUresult cli_cuStreamDestroy_v1(CUstream s)
{
    return cuStreamDestroy(s);
}

/* The context of a stream (NULL: the caller's current one). */
static struct cli_ctx *stream_ctx(CUstream stream)
{
    struct cli_stream *s = cli_handle_check(stream, PROTO_H_STREAM);

    return s != NULL ? s->ctx : NULL;
}

void cli_stream_route(struct cli_call *call, CUstream stream)
{
    struct cli_ctx *c = stream_ctx(stream);

    if (c != NULL)
        cli_call_in(call, c);
}

/* p2pBandwidthLatencyTest synchronizes a stream of device j while device i is current. */
static CUresult stream_call(unsigned op, CUstream stream, bool per_thread)
{
    struct cli_call call = {CLI_ARGS_AS(op, STREAM_SYNCHRONIZE)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_SYNCHRONIZE.stream);

    if (res != CUDA_SUCCESS)
        return res;
    cli_stream_route(&call, stream);
    return cli_call_sync(&call); /* the work is done (or none was left) */
}

static CUresult stream_wait_event(CUstream stream, CUevent event, unsigned flags, bool per_thread)
{
    struct cli_handle *e = cli_handle_check(event, PROTO_H_EVENT);
    struct cli_call call = {CLI_ARGS(STREAM_WAIT_EVENT)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_WAIT_EVENT.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (cli_session_count() > 1 &&
        (res = cli_peer_wait_event(stream_ctx(stream), cli_event_ctx(event), event)) !=
            CLI_PEER_NOT_TAKEN)
        return res;
    call.a.STREAM_WAIT_EVENT.event = e->id;
    call.a.STREAM_WAIT_EVENT.flags = flags;
    cli_stream_route(&call, stream);
    return cli_call_async(&call);
}

CLI_PTSZ_PAIR(cuStreamSynchronize, stream_call, (CUstream s), PROTO_OP_STREAM_SYNCHRONIZE, s)
CLI_PTSZ_PAIR(cuStreamQuery, stream_call, (CUstream s), PROTO_OP_STREAM_QUERY, s)
CLI_PTSZ_PAIR(cuStreamWaitEvent, stream_wait_event, (CUstream s, CUevent e, unsigned f), s, e, f)

static struct cli_stream *stream_object(CUstream stream, CUresult *res_p)
{
    struct cli_stream *s = NULL;

    *res_p = CUDA_SUCCESS;
    if (stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD &&
        (s = cli_handle_check(stream, PROTO_H_STREAM)) == NULL)
        *res_p = CUDA_ERROR_INVALID_HANDLE;
    return s;
}

static CUresult stream_get_priority(CUstream stream, int *priority, bool per_thread)
{
    CUresult res;
    struct cli_stream *s = stream_object(stream, &res);

    if (priority == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS)
        *priority = s != NULL ? s->priority : 0;
    return res;
}

static CUresult stream_get_flags(CUstream stream, unsigned int *flags, bool per_thread)
{
    CUresult res;
    struct cli_stream *s = stream_object(stream, &res);

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS)
        *flags = s != NULL ? s->flags : 0;
    return res;
}

static CUresult stream_get_ctx(CUstream stream, CUcontext *pctx, bool per_thread)
{
    CUresult res;
    struct cli_stream *s = stream_object(stream, &res);

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS)
        *pctx = (CUcontext)(s != NULL ? s->ctx : cli_ctx_current());
    return res;
}

static CUresult stream_get_id(CUstream stream, unsigned long long *id, bool per_thread)
{
    uint64_t sid;

    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_stream_id(stream, per_thread, &sid))
        return CUDA_ERROR_INVALID_HANDLE;
    *id = sid;
    return CUDA_SUCCESS;
}

static CUresult stream_get_device(CUstream stream, CUdevice *dev, bool per_thread)
{
    CUcontext c;
    CUresult res = stream_get_ctx(stream, &c, per_thread);

    if (res == CUDA_SUCCESS && dev == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS)
        res = c != NULL ? (*dev = ((struct cli_ctx *)c)->device, CUDA_SUCCESS)
                        : CUDA_ERROR_INVALID_CONTEXT;
    return res;
}

CLI_PTSZ_PAIR(cuStreamGetPriority, stream_get_priority, (CUstream s, int *p), s, p)
CLI_PTSZ_PAIR(cuStreamGetFlags, stream_get_flags, (CUstream s, unsigned *f), s, f)
CLI_PTSZ_PAIR(cuStreamGetCtx, stream_get_ctx, (CUstream s, CUcontext *c), s, c)
CLI_PTSZ_PAIR(cuStreamGetId, stream_get_id, (CUstream s, unsigned long long *id), s, id)
CLI_PTSZ_PAIR(cuStreamGetDevice, stream_get_device, (CUstream s, CUdevice *d), s, d)

/* Capture status comes from the client's own record of BeginCapture/EndCapture (graph.c). */
static CUresult capture_none(CUstream stream, CUstreamCaptureStatus *status, bool per_thread)
{
    CUresult res;
    struct cli_stream *s = stream_object(stream, &res);

    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS)
        *status = s != NULL && s->capture_id != 0 ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                  : CU_STREAM_CAPTURE_STATUS_NONE;
    return res;
}

/* The status and id are the client's own; the graph and the dependencies come from the
 * worker (graph_capture.c). */
static CUresult capture_info_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                CUgraph *graph, const CUgraphNode **deps,
                                const CUgraphEdgeData **edges, size_t *ndeps, bool per_thread)
{
    CUresult res = capture_none(s, status, per_thread);

    if (res == CUDA_SUCCESS && edges != NULL && deps == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (res != CUDA_SUCCESS)
        return res;
    if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE) { /* nothing valid to say: say nothing */
        if (graph != NULL)
            *graph = NULL;
        if (deps != NULL)
            *deps = NULL;
        if (edges != NULL)
            *edges = NULL;
        if (ndeps != NULL)
            *ndeps = 0;
        return CUDA_SUCCESS;
    }
    if (id != NULL)
        *id = cli_stream_capture_id(s);
    if (graph == NULL && deps == NULL && ndeps == NULL)
        return CUDA_SUCCESS;
    return cli_capture_query(s, per_thread, status, graph, deps, edges, ndeps);
}

static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, size_t *ndeps,
                             bool per_thread)
{
    return capture_info_v3(s, status, id, graph, deps, NULL, ndeps, per_thread);
}

static CUresult capture_info_v1(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                bool per_thread)
{
    return capture_info(s, status, id, NULL, NULL, NULL, per_thread);
}

CLI_PTSZ_PAIR(cuStreamIsCapturing, capture_none, (CUstream s, CUstreamCaptureStatus *st), s, st)
CLI_PTSZ_PAIR(cuStreamGetCaptureInfo_v3, capture_info_v3,
              (CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
               const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n),
              s, st, id, g, d, e, n)
/* Older ABIs of the same query, exported under their own symbol names. */
#define STREAM_PAIR_SYM(tag, sym, impl, params, ...)                                               \
    CLI_EXPORT CUresult tag params __asm__(sym);                                                   \
    CLI_EXPORT CUresult tag params                                                                 \
    {                                                                                              \
        return impl(__VA_ARGS__, false);                                                           \
    }                                                                                              \
    CLI_EXPORT CUresult tag##_ptsz params __asm__(sym "_ptsz");                                    \
    CLI_EXPORT CUresult tag##_ptsz params                                                          \
    {                                                                                              \
        return impl(__VA_ARGS__, true);                                                            \
    }
STREAM_PAIR_SYM(cli_capture_info_v2, "cuStreamGetCaptureInfo_v2", capture_info,
                (CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                 const CUgraphNode **d, size_t *n),
                s, st, id, g, d, n)
STREAM_PAIR_SYM(cli_capture_info_v1, "cuStreamGetCaptureInfo", capture_info_v1,
                (CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id), s, st, id)

/* Host functions run on the client, after the stream's earlier work and before its later
 * work: the stream is synchronized, then the function runs in the caller's thread. (CUDA runs
 * it on a driver thread without blocking the caller; the order of effects is the same.) */
static CUresult host_func(CUstream stream, CUhostFn fn, void *data, bool per_thread)
{
    CUresult res;

    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (cli_stream_capture_id(stream) != 0) /* runs after each launch of the graph */
        return cli_capture_host_fn(stream, fn, data);
    res = stream_call(PROTO_OP_STREAM_SYNCHRONIZE, stream, per_thread);
    if (res == CUDA_SUCCESS)
        fn(data);
    return res;
}

static CUresult stream_callback(CUstream stream, CUstreamCallback cb, void *data,
                                unsigned int flags, bool per_thread)
{
    CUresult res;

    if (cb == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    res = stream_call(PROTO_OP_STREAM_SYNCHRONIZE, stream, per_thread);
    cb(stream, res, data);
    return CUDA_SUCCESS;
}

CLI_PTSZ_PAIR(cuLaunchHostFunc, host_func, (CUstream s, CUhostFn fn, void *data), s, fn, data)
CLI_PTSZ_PAIR(cuStreamAddCallback, stream_callback,
              (CUstream s, CUstreamCallback cb, void *data, unsigned int flags), s, cb, data, flags)

/* Stream attributes are kept by the server's stream; the value travels raw. */
static CUresult stream_attr(unsigned op, CUstream stream, CUstreamAttrID attr,
                            CUstreamAttrValue *value, bool per_thread)
{
    struct cli_call call = {CLI_ARGS_AS(op, STREAM_SET_ATTR, .attr = attr)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_stream_id(stream, per_thread, &call.a.STREAM_SET_ATTR.stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (op == PROTO_OP_STREAM_SET_ATTR) {
        call.data = value;
        call.data_len = sizeof(*value);
    } else {
        call.rdata = value;
        call.rdata_cap = sizeof(*value);
    }
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && op == PROTO_OP_STREAM_GET_ATTR && call.rdata_len != sizeof(*value))
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

static CUresult stream_set_attr(CUstream s, CUstreamAttrID a, const CUstreamAttrValue *v,
                                bool per_thread)
{
    return stream_attr(PROTO_OP_STREAM_SET_ATTR, s, a, (CUstreamAttrValue *)v, per_thread);
}

static CUresult stream_get_attr(CUstream s, CUstreamAttrID a, CUstreamAttrValue *v, bool per_thread)
{
    return stream_attr(PROTO_OP_STREAM_GET_ATTR, s, a, v, per_thread);
}

CLI_PTSZ_PAIR(cuStreamSetAttribute, stream_set_attr,
              (CUstream s, CUstreamAttrID a, const CUstreamAttrValue *v), s, a, v)
CLI_PTSZ_PAIR(cuStreamGetAttribute, stream_get_attr,
              (CUstream s, CUstreamAttrID a, CUstreamAttrValue *v), s, a, v)
