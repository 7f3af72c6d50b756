/* Stream attributes (access policy window, synchronization policy, priority...): the value is
 * a CUstreamAttrValue sent raw; nothing in it names a client-side object. */
#include <string.h>

#include "server/session.h"

/* [stream, attr] data: CUstreamAttrValue (set) / -> data: CUstreamAttrValue (get) */
CUresult srv_op_stream_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_SET_ATTR *a = SRV_ARGS(call, STREAM_SET_ATTR);
    CUstreamAttrValue *v = srv_scratch(s, sizeof(*v)); /* the reply's bytes live until then */
    CUstream st;
    CUresult res;

    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (call->msg->op == PROTO_OP_STREAM_SET_ATTR) {
        if (call->msg->data.len != sizeof(*v))
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(v, call->msg->data.data, sizeof(*v));
        return s->drv.cuStreamSetAttribute(st, (CUstreamAttrID)a->attr, v);
    }
    memset(v, 0, sizeof(*v));
    res = s->drv.cuStreamGetAttribute(st, (CUstreamAttrID)a->attr, v);
    if (res == CUDA_SUCCESS) {
        call->rdata = v;
        call->rdata_len = sizeof(*v);
    }
    return res;
}
