/* Pitched (2D) copies. Host rows travel packed (width bytes each, no pitch) in the call's data
 * or its reply; device-to-device copies stay on the server. A copy moves in slabs of at most
 * SLAB bytes of host rows (whole rows, or pieces of one row wider than a slab), through session
 * scratch, so a copy of any size holds at most SLAB bytes of the worker's memory (it held the
 * whole copy, up to 4 GiB). Inline rows are copied from the call's data where they lie. */
#include <string.h>

#include "common/log.h"
#include "server/session.h"

#define SLAB (16u << 20)

/* One piece of the copy: rows [row, row + rows) and bytes [x, x + width) of each. */
struct piece {
    size_t row, rows, x, width;
};

/* The next piece after p (p->rows == 0: the first); false past the last row. */
static bool next_piece(struct piece *p, size_t w, size_t h)
{
    if (p->rows == 0)
        *p = (struct piece){0, 0, 0, 0};
    else if (p->x + p->width < w)
        p->x += p->width;
    else
        p->row += p->rows, p->x = 0;
    if (p->row >= h)
        return false;
    p->width = w - p->x < SLAB ? w - p->x : SLAB;
    p->rows = w > SLAB ? 1 : (SLAB / w < h - p->row ? SLAB / w : h - p->row);
    return true;
}

/* Copy one piece between host rows at host (pitch hpitch) and the device end of c. */
static CUresult copy_piece(struct srv_session *s, const CUDA_MEMCPY2D *c, const struct piece *p,
                           void *host, size_t hpitch, CUstream st, bool async)
{
    CUDA_MEMCPY2D k = *c;
    CUresult res;

    k.WidthInBytes = p->width, k.Height = p->rows;
    if (k.srcMemoryType == CU_MEMORYTYPE_HOST) {
        k.srcHost = host, k.srcPitch = hpitch;
        k.dstDevice = c->dstDevice + p->row * c->dstPitch + p->x;
    } else {
        k.dstHost = host, k.dstPitch = hpitch;
        k.srcDevice = c->srcDevice + p->row * c->srcPitch + p->x;
    }
    /* host scratch is reused by the next piece: each completes here */
    res = async ? s->drv.cuMemcpy2DAsync(&k, st) : s->drv.cuMemcpy2D(&k);
    return res == CUDA_SUCCESS && async ? s->drv.cuStreamSynchronize(st) : res;
}

/* Host to device: rows from the call's data in place, or from its bulk slab by slab. */
static CUresult htod(struct srv_session *s, struct srv_call *call, const CUDA_MEMCPY2D *c,
                     CUstream st)
{
    size_t w = c->WidthInBytes, h = c->Height, len = w * h, got = 0;
    bool async = SRV_ARGS(call, MEMCPY_2D)->async;
    struct piece p = {0};
    CUresult res = CUDA_SUCCESS;
    uint8_t *buf;

    if (call->hdr->bulk_len == 0) {
        if (call->msg->data.len != len)
            return CUDA_ERROR_INVALID_VALUE;
        while (res == CUDA_SUCCESS && next_piece(&p, w, h))
            res = copy_piece(s, c, &p, call->msg->data.data + p.row * w + p.x, w, st, async);
        return res;
    }
    if (call->hdr->bulk_len != len)
        return CUDA_ERROR_INVALID_VALUE;
    if ((buf = srv_scratch(s, len < SLAB ? len : SLAB)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call->bulk_taken = true;
    while (next_piece(&p, w, h)) {
        size_t n = p.rows * p.width;
        if (transport_recv(s->conn, buf, n) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        got += n;
        if (res == CUDA_SUCCESS)
            res = copy_piece(s, c, &p, buf, p.width, st, async);
    }
    return got == len ? res : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* Device to host: the reply's bulk, streamed slab by slab after the first one is copied. */
static CUresult dtoh(struct srv_session *s, struct srv_call *call, const CUDA_MEMCPY2D *c,
                     CUstream st)
{
    size_t w = c->WidthInBytes, h = c->Height, len = w * h;
    bool async = SRV_ARGS(call, MEMCPY_2D)->async;
    struct piece p = {0};
    uint8_t *buf = srv_scratch(s, len < SLAB ? len : SLAB);
    CUresult res;

    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    next_piece(&p, w, h);
    if ((res = copy_piece(s, c, &p, buf, p.width, st, async)) != CUDA_SUCCESS)
        return res;
    if (len <= SLAB) /* one piece: an ordinary reply */
        return srv_reply_bulk(s, call, buf, len);
    if ((res = srv_reply_bulk(s, call, NULL, len)) != CUDA_SUCCESS)
        return res;
    for (;;) {
        struct iovec iov = {buf, p.rows * p.width};
        if (transport_sendv(s->conn, &iov, 1) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        if (!next_piece(&p, w, h))
            break;
        if (res == CUDA_SUCCESS)
            res = copy_piece(s, c, &p, buf, p.width, st, async);
        if (res != CUDA_SUCCESS)
            memset(buf, 0, p.rows * p.width); /* framing holds; the error stays sticky */
    }
    if (res != CUDA_SUCCESS)
        rg_warn("session %llu: 2D DtoH copy failed after the reply was sent (sticky error)",
                (unsigned long long)s->id);
    return CUDA_SUCCESS;
}

/* [dir 0=HtoD 1=DtoH 2=DtoD, dst, dpitch, src, spitch, width, height, stream, async] */
CUresult srv_op_memcpy_2d(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_2D *a = SRV_ARGS(call, MEMCPY_2D);
    CUDA_MEMCPY2D c = {.dstPitch = a->dpitch,
                       .srcPitch = a->spitch,
                       .WidthInBytes = a->width,
                       .Height = a->height};
    CUstream st;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->dir > 2 || a->width == 0 || a->height == 0 || a->height > (1u << 30) / a->width * 4)
        return CUDA_ERROR_INVALID_VALUE;
    c.srcMemoryType = a->dir == 0 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstMemoryType = a->dir == 1 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcDevice = a->src, c.dstDevice = a->dst;
    if (a->dir == 0)
        return htod(s, call, &c, st);
    if (a->dir == 1)
        return dtoh(s, call, &c, st);
    return a->async ? s->drv.cuMemcpy2DAsync(&c, st) : s->drv.cuMemcpy2D(&c);
}
