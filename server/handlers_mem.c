/* Memory calls: allocation, copies in every direction (bulk streamed through two pinned
 * staging buffers so the network and the copy engine overlap), memsets. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/lanes.h"
#include "server/session.h"

#define STAGING_CHUNK (8u << 20)

/* The component's state. */
struct copies_state {
    struct srv_staging staging;
    uint64_t staging_ctx;            /* the context they were allocated in (they die with it) */
    size_t staging_most;             /* the most the session held (for the teardown log) */
    uint8_t small[PROTO_INLINE_MAX]; /* an inline DtoH reply's bytes */
};

static struct copies_state *copies_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_COPIES);
}

struct srv_staging *srv_staging_of(struct srv_session *s)
{
    return &copies_of(s)->staging;
}

size_t srv_staging_most(struct srv_session *s)
{
    const struct copies_state *c = copies_of(s);

    return c != NULL ? c->staging_most : 0;
}

/* The staging buffers, after the RDMA copies deregistered them. */
static void copies_teardown(struct srv_session *s, void *state)
{
    struct copies_state *c = state;

    for (int i = 0; i < 2; i++)
        if (c->staging.buf[i] != NULL)
            s->drv.cuMemFreeHost(c->staging.buf[i]);
}

const struct srv_component srv_copies_component = {
    .name = "copies", .state_size = sizeof(struct copies_state), .teardown = copies_teardown};

/* Portable, so copies in any of the session's contexts use them as pinned memory; they still
 * belong to the context current here and are freed before it goes (srv_staging_release). */
CUresult srv_staging_ready(struct srv_session *s)
{
    struct copies_state *c = copies_of(s);

    if (c->staging.buf[0] == NULL && c->staging.buf[1] == NULL)
        c->staging_ctx = s->current_ctx;
    for (int i = 0; i < 2; i++) {
        if (c->staging.buf[i] != NULL)
            continue;
        CUresult res =
            s->drv.cuMemHostAlloc(&c->staging.buf[i], STAGING_CHUNK, CU_MEMHOSTALLOC_PORTABLE);
        if (res != CUDA_SUCCESS)
            return res;
    }
    c->staging.len = STAGING_CHUNK;
    c->staging_most = 2 * STAGING_CHUNK;
    return CUDA_SUCCESS;
}

void srv_staging_release(struct srv_session *s, uint64_t ctx_id)
{
    struct copies_state *c = copies_of(s);

    srv_lanes_staging_release(s); /* whichever context they came from: made again when needed */
    if (c->staging_ctx != ctx_id)
        return;
    srv_rdma_staging_release(s);
    for (int i = 0; i < 2; i++)
        if (c->staging.buf[i] != NULL)
            s->drv.cuMemFreeHost(c->staging.buf[i]);
    c->staging.buf[0] = c->staging.buf[1] = NULL;
    c->staging.len = 0;
}

CUresult srv_op_mem_alloc(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ALLOC *a = SRV_ARGS(call, MEM_ALLOC);
    CUdeviceptr d;
    CUresult res;

    if (!srv_quota_allows(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemAlloc(&d, a->size);
    return srv_alloc_answer(s, call, res, d, a->size);
}

CUresult srv_op_mem_alloc_pitch(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ALLOC_PITCH *a = SRV_ARGS(call, MEM_ALLOC_PITCH);
    CUdeviceptr d;
    size_t pitch;
    CUresult res;

    /* width x height at least, before the driver allocates (the padding is known after) */
    if (a->height != 0 && a->width > UINT64_MAX / a->height)
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_quota_allows(s, a->width * a->height))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemAllocPitch(&d, &pitch, a->width, a->height, (unsigned)a->elemsize);
    if (res == CUDA_SUCCESS && !srv_quota_allows(s, (uint64_t)pitch * a->height)) {
        s->drv.cuMemFree(d); /* the padded size is known only now */
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (res == CUDA_SUCCESS && (res = srv_alloc_record(s, d, pitch * a->height)) == CUDA_SUCCESS) {
        call->out[call->nout++] = d;
        call->out[call->nout++] = pitch;
    }
    return res;
}

CUresult srv_op_mem_free(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_FREE *a = SRV_ARGS(call, MEM_FREE);
    CUresult res;

    srv_rdma_direct_forget(s, a->dptr); /* before the memory goes */
    res = s->drv.cuMemFree(a->dptr);

    if (res == CUDA_SUCCESS)
        srv_alloc_del(s, a->dptr);
    return res;
}

CUresult srv_op_mem_get_info(struct srv_session *s, struct srv_call *call)
{
    size_t free_b, total;
    CUresult res = s->drv.cuMemGetInfo(&free_b, &total);

    srv_ipc_charge_orphans(s);
    if (res == CUDA_SUCCESS && s->mem_quota != 0) { /* frameworks size themselves to this */
        uint64_t left = s->mem_quota > s->mem_used ? s->mem_quota - s->mem_used : 0;
        free_b = left < free_b ? left : free_b;
        total = s->mem_quota < total ? s->mem_quota : total;
    }
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = free_b;
        call->out[call->nout++] = total;
    }
    return res;
}

/* HtoD from frame bulk: receive chunk k while chunk k-1 is being copied. */
static CUresult htod_bulk(struct srv_session *s, struct srv_call *call, CUdeviceptr dst, size_t len,
                          CUstream stream)
{
    struct copies_state *c = copies_of(s);
    CUresult res = srv_staging_ready(s);
    size_t off = 0, n;

    call->bulk_taken = true;
    for (int k = 0; off < len; off += n, k ^= 1) {
        n = len - off < STAGING_CHUNK ? len - off : STAGING_CHUNK;
        if (res != CUDA_SUCCESS) {
            if (proto_discard(s->conn, len - off) != RG_OK)
                return CUDA_ERROR_DEVICE_UNAVAILABLE;
            break;
        }
        if (transport_recv(s->conn, c->staging.buf[k], n) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        res = s->drv.cuStreamSynchronize(stream);
        if (res == CUDA_SUCCESS)
            res = s->drv.cuMemcpyHtoDAsync(dst + off, c->staging.buf[k], n, stream);
    }
    if (res == CUDA_SUCCESS)
        res = s->drv.cuStreamSynchronize(stream);
    return res;
}

CUresult srv_op_memcpy_htod(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_HTOD *a = SRV_ARGS(call, MEMCPY_HTOD);
    CUstream stream;
    size_t len = a->size;
    const ProtobufCBinaryData *data = &call->msg->data;

    if (!srv_stream(s, a->stream, &stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (call->hdr->bulk_len > 0) {
        if (call->hdr->bulk_len != len)
            return CUDA_ERROR_INVALID_VALUE;
        return htod_bulk(s, call, a->dst, len, stream);
    }
    if (data->len != len)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->async)
        return s->drv.cuMemcpyHtoDAsync(a->dst, data->data, len, stream);
    return s->drv.cuMemcpyHtoD(a->dst, data->data, len);
}

static CUresult dtoh_chunk(struct srv_session *s, void *dst, CUdeviceptr src, size_t n,
                           CUstream stream)
{
    CUresult res = s->drv.cuMemcpyDtoHAsync(dst, src, n, stream);

    return res == CUDA_SUCCESS ? s->drv.cuStreamSynchronize(stream) : res;
}

/* DtoH as a streamed reply: header first, then chunk k sent while chunk k+1 is copied. */
static CUresult dtoh_bulk(struct srv_session *s, struct srv_call *call, CUdeviceptr src, size_t len,
                          CUstream stream)
{
    struct copies_state *c = copies_of(s);
    CUresult res = srv_staging_ready(s);
    size_t n = len < STAGING_CHUNK ? len : STAGING_CHUNK, next;

    if (res == CUDA_SUCCESS)
        res = dtoh_chunk(s, c->staging.buf[0], src, n, stream);
    if (res != CUDA_SUCCESS)
        return res;
    if ((res = srv_reply_bulk(s, call, NULL, len)) != CUDA_SUCCESS)
        return res;
    for (size_t off = 0; off < len; off += n, n = next) {
        int k = (int)((off / STAGING_CHUNK) & 1);
        struct iovec iov = {c->staging.buf[k], n};
        next = len - off - n < STAGING_CHUNK ? len - off - n : STAGING_CHUNK;
        if (next > 0 && res == CUDA_SUCCESS)
            res = s->drv.cuMemcpyDtoHAsync(c->staging.buf[k ^ 1], src + off + n, next, stream);
        if (transport_sendv(s->conn, &iov, 1) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        if (next > 0 && res == CUDA_SUCCESS)
            res = s->drv.cuStreamSynchronize(stream);
        if (next > 0 && res != CUDA_SUCCESS)
            memset(c->staging.buf[k ^ 1], 0, next); /* framing holds; the error stays sticky */
    }
    if (res != CUDA_SUCCESS)
        rg_warn("session %llu: DtoH copy failed after the reply was sent (sticky error)",
                (unsigned long long)s->id);
    return CUDA_SUCCESS;
}

CUresult srv_op_memcpy_dtoh(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_DTOH *a = SRV_ARGS(call, MEMCPY_DTOH);
    uint8_t *small = copies_of(s)->small;
    CUstream stream;
    size_t len = a->size;
    CUresult res;

    if (!srv_stream(s, a->stream, &stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (len > PROTO_INLINE_MAX)
        return dtoh_bulk(s, call, a->src, len, stream);
    res = a->async ? dtoh_chunk(s, small, a->src, len, stream)
                   : s->drv.cuMemcpyDtoH(small, a->src, len);
    if (res == CUDA_SUCCESS) {
        call->rdata = small;
        call->rdata_len = len;
    }
    return res;
}

CUresult srv_op_memcpy_dtod(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_DTOD *a = SRV_ARGS(call, MEMCPY_DTOD);
    CUstream stream;

    if (!srv_stream(s, a->stream, &stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->async)
        return s->drv.cuMemcpyDtoDAsync(a->dst, a->src, a->size, stream);
    return s->drv.cuMemcpyDtoD(a->dst, a->src, a->size);
}

CUresult srv_op_memset(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMSET *a = SRV_ARGS(call, MEMSET);
    CUstream st;
    CUdeviceptr d = a->dst;
    size_t n = a->count;
    bool async = a->async;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a->elemsize) {
    case 1:
        return async ? s->drv.cuMemsetD8Async(d, (unsigned char)a->value, n, st)
                     : s->drv.cuMemsetD8(d, (unsigned char)a->value, n);
    case 2:
        return async ? s->drv.cuMemsetD16Async(d, (unsigned short)a->value, n, st)
                     : s->drv.cuMemsetD16(d, (unsigned short)a->value, n);
    case 4:
        return async ? s->drv.cuMemsetD32Async(d, (unsigned)a->value, n, st)
                     : s->drv.cuMemsetD32(d, (unsigned)a->value, n);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult srv_op_memset_2d(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMSET_2D *a = SRV_ARGS(call, MEMSET_2D);
    CUstream st;
    CUdeviceptr d = a->dst;
    size_t p = a->pitch, w = a->width, h = a->height;
    bool async = a->async;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a->elemsize) {
    case 1:
        return async ? s->drv.cuMemsetD2D8Async(d, p, (unsigned char)a->value, w, h, st)
                     : s->drv.cuMemsetD2D8(d, p, (unsigned char)a->value, w, h);
    case 2:
        return async ? s->drv.cuMemsetD2D16Async(d, p, (unsigned short)a->value, w, h, st)
                     : s->drv.cuMemsetD2D16(d, p, (unsigned short)a->value, w, h);
    case 4:
        return async ? s->drv.cuMemsetD2D32Async(d, p, (unsigned)a->value, w, h, st)
                     : s->drv.cuMemsetD2D32(d, p, (unsigned)a->value, w, h);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult srv_op_mem_alloc_async(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_ALLOC_ASYNC *a = SRV_ARGS(call, MEM_ALLOC_ASYNC);
    CUstream st;
    CUdeviceptr d;
    CUresult res;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!srv_quota_allows(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuMemAllocAsync(&d, a->size, st);
    return srv_alloc_answer(s, call, res, d, a->size);
}

CUresult srv_op_mem_free_async(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEM_FREE_ASYNC *a = SRV_ARGS(call, MEM_FREE_ASYNC);
    CUstream st;
    CUresult res;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    srv_rdma_direct_forget(s, a->dptr); /* no copy in flight uses it: they complete in the call */
    res = s->drv.cuMemFreeAsync(a->dptr, st);
    if (res == CUDA_SUCCESS)
        srv_alloc_del(s, a->dptr);
    return res;
}
