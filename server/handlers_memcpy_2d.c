/* Pitched (2D) copies. Host rows travel packed (width bytes each, no pitch) in the call's data
 * or its reply; the worker copies them between its scratch buffer and device memory with the
 * device side's pitch. Device-to-device copies stay on the server. */
#include "server/session.h"

/* [dir 0=HtoD 1=DtoH 2=DtoD, dst, dpitch, src, spitch, width, height, stream, async] */
CUresult srv_op_memcpy_2d(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_2D *a = SRV_ARGS(call, MEMCPY_2D);
    CUDA_MEMCPY2D c = {.dstPitch = a->dpitch,
                       .srcPitch = a->spitch,
                       .WidthInBytes = a->width,
                       .Height = a->height};
    size_t len = a->width * a->height;
    CUstream st;
    void *buf = NULL;
    CUresult res;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->dir > 2 || a->width == 0 || a->height == 0 || a->height > (1u << 30) / a->width * 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->dir != 2 && (buf = srv_scratch(s, len)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c.srcMemoryType = a->dir == 0 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstMemoryType = a->dir == 1 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcHost = buf, c.srcDevice = a->src;
    c.dstHost = buf, c.dstDevice = a->dst;
    if (a->dir == 0) {
        c.srcPitch = a->width;
        if (srv_recv_input(s, call, buf, len) != RG_OK)
            return call->bulk_taken ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_INVALID_VALUE;
    }
    if (a->dir == 1)
        c.dstPitch = a->width;
    /* Host scratch is reused by the next call: copies through it complete here. */
    res = a->async ? s->drv.cuMemcpy2DAsync(&c, st) : s->drv.cuMemcpy2D(&c);
    if (res == CUDA_SUCCESS && a->async && a->dir != 2)
        res = s->drv.cuStreamSynchronize(st);
    if (res != CUDA_SUCCESS || a->dir != 1)
        return res;
    return srv_reply_bulk(s, call, buf, len);
}
