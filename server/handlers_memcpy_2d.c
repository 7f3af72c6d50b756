/* Pitched (2D) copies. Host rows travel packed (width bytes each, no pitch) in the call's data
 * or its reply; the worker copies them between its scratch buffer and device memory with the
 * device side's pitch. Device-to-device copies stay on the server. */
#include "server/session.h"

#define ARG(i) (call->msg->args[i])

/* [dir 0=HtoD 1=DtoH 2=DtoD, dst, dpitch, src, spitch, width, height, stream, async] */
static CUresult h_memcpy_2d(struct srv_session *s, struct srv_call *call)
{
    CUDA_MEMCPY2D c = {.dstPitch = ARG(2), .srcPitch = ARG(4), .WidthInBytes = ARG(5),
                       .Height = ARG(6)};
    size_t len = ARG(5) * ARG(6);
    CUstream st;
    void *buf = NULL;
    CUresult res;

    if (!srv_stream(s, ARG(7), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (ARG(0) > 2 || ARG(5) == 0 || ARG(6) == 0 || ARG(6) > (1u << 30) / ARG(5) * 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (ARG(0) != 2 && (buf = srv_scratch(s, len)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c.srcMemoryType = ARG(0) == 0 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstMemoryType = ARG(0) == 1 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcHost = buf, c.srcDevice = ARG(3);
    c.dstHost = buf, c.dstDevice = ARG(1);
    if (ARG(0) == 0) {
        c.srcPitch = ARG(5);
        if (srv_recv_input(s, call, buf, len) != RG_OK)
            return call->bulk_taken ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_INVALID_VALUE;
    }
    if (ARG(0) == 1)
        c.dstPitch = ARG(5);
    /* Host scratch is reused by the next call: copies through it complete here. */
    res = ARG(8) ? s->drv.cuMemcpy2DAsync(&c, st) : s->drv.cuMemcpy2D(&c);
    if (res == CUDA_SUCCESS && ARG(8) && ARG(0) != 2)
        res = s->drv.cuStreamSynchronize(st);
    if (res != CUDA_SUCCESS || ARG(0) != 1)
        return res;
    return srv_reply_bulk(s, call, buf, len);
}

const srv_handler_fn srv_memcpy_2d_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_MEMCPY_2D] = h_memcpy_2d,
};
