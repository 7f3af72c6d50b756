/* Streams and events: create, destroy, synchronize, query, wait, record, elapsed time. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/session.h"

CUresult srv_op_stream_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_CREATE *a = SRV_ARGS(call, STREAM_CREATE);
    CUstream st;
    CUresult res =
        s->drv.cuStreamCreateWithPriority(&st, (unsigned)a->flags, (int)(int64_t)a->priority);

    return srv_handle_adopt(s, a->id, PROTO_H_STREAM, res, st);
}

CUresult srv_op_stream_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_DESTROY *a = SRV_ARGS(call, STREAM_DESTROY);
    CUstream st = srv_handle_real(s, a->handle, PROTO_H_STREAM);

    if (st != NULL)
        srv_capture_abandon(s, st);
    return srv_handle_destroy(s, a->handle, PROTO_H_STREAM);
}

CUresult srv_op_stream_sync_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_SYNCHRONIZE *a = SRV_ARGS(call, STREAM_SYNCHRONIZE);
    CUstream st;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_STREAM_QUERY ? s->drv.cuStreamQuery(st)
                                                  : s->drv.cuStreamSynchronize(st);
}

CUresult srv_op_stream_wait_event(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_WAIT_EVENT *a = SRV_ARGS(call, STREAM_WAIT_EVENT);
    CUstream st;
    CUevent ev = srv_handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuStreamWaitEvent(st, ev, (unsigned)a->flags);
}

CUresult srv_op_event_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_CREATE *a = SRV_ARGS(call, EVENT_CREATE);
    CUevent ev;
    CUresult res = s->drv.cuEventCreate(&ev, (unsigned)a->flags);

    return srv_handle_adopt(s, a->id, PROTO_H_EVENT, res, ev);
}

CUresult srv_op_event_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_DESTROY *a = SRV_ARGS(call, EVENT_DESTROY);
    return srv_handle_destroy(s, a->handle, PROTO_H_EVENT);
}

CUresult srv_op_event_record(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_RECORD *a = SRV_ARGS(call, EVENT_RECORD);
    CUstream st;
    CUevent ev = srv_handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuEventRecordWithFlags(ev, st, (unsigned)a->flags);
}

CUresult srv_op_event_sync_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_SYNCHRONIZE *a = SRV_ARGS(call, EVENT_SYNCHRONIZE);
    CUevent ev = srv_handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_EVENT_QUERY ? s->drv.cuEventQuery(ev)
                                                 : s->drv.cuEventSynchronize(ev);
}

CUresult srv_op_event_elapsed(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_ELAPSED *a = SRV_ARGS(call, EVENT_ELAPSED);
    CUevent start = srv_handle_real(s, a->start, PROTO_H_EVENT);
    CUevent end = srv_handle_real(s, a->end, PROTO_H_EVENT);
    float ms;
    uint32_t bits;
    CUresult res;

    if (start == NULL || end == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuEventElapsedTime(&ms, start, end);
    if (res == CUDA_SUCCESS) {
        memcpy(&bits, &ms, sizeof(bits));
        call->out[call->nout++] = bits;
    }
    return res;
}

/* Streams, then events (after the graphs, before the modules their work used). */
static void streams_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_STREAM);
    srv_handles_destroy_all(s, PROTO_H_EVENT);
}

const struct srv_component srv_streams_component = {.name = "streams",
                                                    .teardown = streams_teardown};
