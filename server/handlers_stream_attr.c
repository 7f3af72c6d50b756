/* Stream attributes (access policy window, synchronization policy, priority...): the value is
 * a CUstreamAttrValue sent raw; nothing in it names a client-side object. */
#include <string.h>

#include "server/session.h"

#define ARG(i) (call->msg->args[i])

/* [stream, attr] data: CUstreamAttrValue (set) / -> data: CUstreamAttrValue (get) */
static CUresult h_stream_attr(struct srv_session *s, struct srv_call *call)
{
    static CUstreamAttrValue v;
    CUstream st;
    CUresult res;

    if (!srv_stream(s, ARG(0), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (call->msg->op == PROTO_OP_STREAM_SET_ATTR) {
        if (call->msg->data.len != sizeof(v))
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(&v, call->msg->data.data, sizeof(v));
        return s->drv.cuStreamSetAttribute(st, (CUstreamAttrID)ARG(1), &v);
    }
    memset(&v, 0, sizeof(v));
    res = s->drv.cuStreamGetAttribute(st, (CUstreamAttrID)ARG(1), &v);
    if (res == CUDA_SUCCESS) {
        call->rdata = &v;
        call->rdata_len = sizeof(v);
    }
    return res;
}

const srv_handler_fn srv_stream_attr_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_STREAM_SET_ATTR] = h_stream_attr,
    [PROTO_OP_STREAM_GET_ATTR] = h_stream_attr,
};
