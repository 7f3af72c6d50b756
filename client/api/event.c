/* Events. Creation, record and destruction do not wait; synchronize, query and elapsed time
 * round-trip. */
#include <stdlib.h>
#include <string.h>

#include "client/api/api.h"

struct cli_event {
    struct cli_handle h;
    struct cli_ctx *ctx;
    unsigned flags;
};

CLI_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    struct cli_event *e;
    struct cli_call call = {CLI_ARGS(EVENT_CREATE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (ph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((e = calloc(1, sizeof(*e))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&e->h, PROTO_H_EVENT);
    e->ctx = cli_ctx_current();
    e->flags = flags;
    call.a.EVENT_CREATE.id = e->h.id;
    call.a.EVENT_CREATE.flags = flags;
    res = cli_call_async(&call);
    if (res != CUDA_SUCCESS) {
        free(e);
        return res;
    }
    *ph = (CUevent)e;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuEventDestroy(CUevent event)
{
    struct cli_event *e = cli_handle_check(event, PROTO_H_EVENT);

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return cli_handle_destroy(&e->h, PROTO_OP_EVENT_DESTROY, e->ctx);
}

CLI_EXPORT CUresult cli_cuEventDestroy_v1(CUevent e) __asm__("cuEventDestroy");
CLI_EXPORT CUresult cli_cuEventDestroy_v1(CUevent e)
{
    return cuEventDestroy(e);
}

static CUresult event_record(CUevent event, CUstream stream, unsigned flags, bool per_thread)
{
    struct cli_event *e = cli_handle_check(event, PROTO_H_EVENT);
    struct cli_call call = {CLI_ARGS(EVENT_RECORD)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.EVENT_RECORD.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.EVENT_RECORD.event = e->h.id;
    call.a.EVENT_RECORD.flags = flags;
    cli_stream_route(&call, stream); /* the stream's context, also when another is current */
    return cli_call_async(&call);
}

CLI_EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    return event_record(e, s, 0, false);
}
CLI_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
    return event_record(e, s, 0, true);
}
CLI_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, false);
}
CLI_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, true);
}

static CUresult event_call(unsigned op, CUevent event)
{
    struct cli_event *e = cli_handle_check(event, PROTO_H_EVENT);
    struct cli_call call = {CLI_ARGS_AS(op, EVENT_SYNCHRONIZE)};

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.EVENT_SYNCHRONIZE.event = e->h.id;
    cli_call_in(&call, e->ctx);
    return cli_call_sync(&call); /* the work is done (or none was left) */
}

CLI_EXPORT CUresult cuEventSynchronize(CUevent e)
{
    return event_call(PROTO_OP_EVENT_SYNCHRONIZE, e);
}

CLI_EXPORT CUresult cuEventQuery(CUevent e)
{
    return event_call(PROTO_OP_EVENT_QUERY, e);
}

CLI_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    struct cli_event *s = cli_handle_check(start, PROTO_H_EVENT);
    struct cli_event *e = cli_handle_check(end, PROTO_H_EVENT);
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(EVENT_ELAPSED), .out = out, .out_cap = 1};
    uint32_t bits;
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ms == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (s == NULL || e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.EVENT_ELAPSED.start = s->h.id;
    call.a.EVENT_ELAPSED.end = e->h.id;
    cli_call_in(&call, s->ctx);
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout >= 1) {
        bits = (uint32_t)out[0];
        memcpy(ms, &bits, sizeof(*ms));
    }
    return res;
}

/* v1 (requested by cudart at version 2000) has the same signature. */
CLI_EXPORT CUresult cli_cuEventElapsedTime_v1(float *ms, CUevent a,
                                              CUevent b) __asm__("cuEventElapsedTime");
CLI_EXPORT CUresult cli_cuEventElapsedTime_v1(float *ms, CUevent a, CUevent b)
{
    return cuEventElapsedTime(ms, a, b);
}

struct cli_ctx *cli_event_ctx(CUevent event)
{
    struct cli_event *e = cli_handle_check(event, PROTO_H_EVENT);

    return e != NULL ? e->ctx : NULL;
}

bool cli_event_ids(CUevent event, uint64_t *id_p, struct cli_call *call)
{
    struct cli_event *e = cli_handle_check(event, PROTO_H_EVENT);

    if (e == NULL)
        return false;
    *id_p = e->h.id;
    cli_call_in(call, e->ctx); /* its context and that context's server */
    return true;
}

CUresult cli_event_bind(struct cli_call *call, unsigned flags, CUevent *ph)
{
    struct cli_event *e = calloc(1, sizeof(*e));
    CUresult res;

    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&e->h, PROTO_H_EVENT);
    e->ctx = cli_ctx_current();
    e->flags = flags;
    call->a.IPC_OPEN_EVENT_HANDLE.id = e->h.id;
    res = cli_call_sync(call);
    if (res != CUDA_SUCCESS) {
        cli_handle_kill(&e->h);
        free(e);
        return res;
    }
    *ph = (CUevent)e;
    return CUDA_SUCCESS;
}
