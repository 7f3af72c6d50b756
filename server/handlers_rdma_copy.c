/* One-sided bulk copies on sessions that run on RDMA (proto/ops.h MEMCPY_HTOD_RDMA and
 * MEMCPY_DTOH_RDMA). The client names its registered pinned memory [address, key, length];
 * the worker moves the bytes with RDMA READ / WRITE through its two staging buffers, which are
 * registered with the session's connection once, so that the NIC moving chunk k overlaps the
 * copy engine moving chunk k-1 (HtoD) or k+1 (DtoH). The reply follows the last READ or WRITE,
 * so a synchronous copy is complete when the client sees it.
 *
 * The NIC checks the key, bounds and access of every request against the client's
 * registration; a refusal breaks the connection (transport/rdma.h), which ends this session
 * only (the worker's next send fails). Here the call itself is checked: a size that is 0,
 * an address range that wraps, a key wider than 32 bits. */
#include "common/log.h"
#include "server/session.h"
#include "transport/transport.h"

#define ARG(i) (call->msg->args[i])

/* The staging buffers, registered with the connection for local writes (READ lands there). */
static CUresult staging_registered(struct srv_session *s)
{
    CUresult res = srv_staging_ready(s);

    for (int i = 0; i < 2 && res == CUDA_SUCCESS; i++) {
        if (s->staging_mr[i] != NULL)
            continue;
        if (s->conn->ops->mem_reg(s->conn, s->staging[i], s->staging_len,
                                  TRANSPORT_ACCESS_LOCAL_WRITE, &s->staging_mr[i]) != RG_OK)
            res = CUDA_ERROR_OUT_OF_MEMORY; /* the transport logged why */
    }
    return res;
}

void srv_rdma_staging_release(struct srv_session *s)
{
    for (int i = 0; i < 2; i++) {
        if (s->staging_mr[i] != NULL)
            s->staging_mr[i]->ops->mem_dereg(s->staging_mr[i]);
        s->staging_mr[i] = NULL;
    }
}

void srv_rdma_copy_report(const struct srv_session *s)
{
    if (s->rdma_reads + s->rdma_writes > 0)
        rg_info("session %llu: one-sided copies: %llu HtoD (%llu bytes by RDMA READ), %llu DtoH "
                "(%llu bytes by RDMA WRITE)",
                (unsigned long long)s->id, (unsigned long long)s->rdma_reads,
                (unsigned long long)s->rdma_read_bytes, (unsigned long long)s->rdma_writes,
                (unsigned long long)s->rdma_write_bytes);
}

/* Checks common to both directions; the stream in *stream_p. */
static CUresult rdma_call_ok(struct srv_session *s, struct srv_call *call, CUstream *stream_p)
{
    if (s->conn->ops != &transport_rdma_ops) {
        rg_warn("session %llu: %s on a session that does not run on RDMA",
                (unsigned long long)s->id, proto_op_name(call->msg->op));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (ARG(1) == 0 || ARG(4) + ARG(1) < ARG(4) || ARG(5) > UINT32_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    return srv_stream(s, ARG(2), stream_p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A READ or WRITE of n bytes at offset off of the client's range the call named. */
static CUresult remote_io(struct srv_session *s, struct srv_call *call, bool write, int k,
                          size_t off, size_t n)
{
    uint64_t raddr = ARG(4) + off;
    uint32_t rkey = (uint32_t)ARG(5);
    rg_status_t st;

    if (off > ARG(1) || n > ARG(1) - off || n > s->staging_len) /* never outside the call's range */
        return CUDA_ERROR_INVALID_VALUE;
    st = write ? s->conn->ops->write(s->conn, s->staging_mr[k], s->staging[k], raddr, rkey, n)
               : s->conn->ops->read(s->conn, s->staging_mr[k], s->staging[k], raddr, rkey, n);
    if (st != RG_OK) {
        rg_error("session %llu: RDMA %s of the client's memory at %#llx (+%zu, key %#x) failed: "
                 "%s; ending the session",
                 (unsigned long long)s->id, write ? "WRITE" : "READ", (unsigned long long)raddr, n,
                 rkey,
                 st == RG_ERR_INVALID ? "the client refused the key, range or access"
                                      : rg_status_str(st));
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    return CUDA_SUCCESS;
}

/* [dst, size, stream, async, raddr, rkey]: READ chunk k while chunk k-1 is copied to the
 * device; chunk k-2 (same buffer) was waited for before chunk k-1 was issued. */
static CUresult h_memcpy_htod_rdma(struct srv_session *s, struct srv_call *call)
{
    CUdeviceptr dst = ARG(0);
    size_t len = ARG(1), n;
    CUstream stream;
    CUresult res = rdma_call_ok(s, call, &stream);

    if (res == CUDA_SUCCESS)
        res = staging_registered(s);
    for (size_t off = 0, k = 0; res == CUDA_SUCCESS && off < len; off += n, k ^= 1) {
        n = len - off < s->staging_len ? len - off : s->staging_len;
        if ((res = remote_io(s, call, false, (int)k, off, n)) != CUDA_SUCCESS)
            return res;
        res = s->drv.cuStreamSynchronize(stream);
        if (res == CUDA_SUCCESS)
            res = s->drv.cuMemcpyHtoDAsync(dst + off, s->staging[k], n, stream);
    }
    if (res == CUDA_SUCCESS)
        res = s->drv.cuStreamSynchronize(stream);
    if (res == CUDA_SUCCESS) {
        s->rdma_reads++;
        s->rdma_read_bytes += len;
    }
    return res;
}

/* [src, size, stream, async, raddr, rkey]: WRITE chunk k while chunk k+1 is copied from the
 * device into the other buffer; the reply (or nothing, for NOREPLY) follows the last WRITE. */
static CUresult h_memcpy_dtoh_rdma(struct srv_session *s, struct srv_call *call)
{
    CUdeviceptr src = ARG(0);
    size_t len = ARG(1), n = 0, next;
    CUstream stream;
    CUresult res = rdma_call_ok(s, call, &stream);

    if (res == CUDA_SUCCESS && (res = staging_registered(s)) == CUDA_SUCCESS) {
        n = len < s->staging_len ? len : s->staging_len;
        res = s->drv.cuMemcpyDtoHAsync(s->staging[0], src, n, stream);
    }
    if (res == CUDA_SUCCESS)
        res = s->drv.cuStreamSynchronize(stream);
    for (size_t off = 0, k = 0; res == CUDA_SUCCESS && off < len; off += n, n = next, k ^= 1) {
        next = len - off - n < s->staging_len ? len - off - n : s->staging_len;
        if (next > 0)
            res = s->drv.cuMemcpyDtoHAsync(s->staging[k ^ 1], src + off + n, next, stream);
        if (remote_io(s, call, true, (int)k, off, n) != CUDA_SUCCESS)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        if (next > 0 && res == CUDA_SUCCESS)
            res = s->drv.cuStreamSynchronize(stream);
    }
    if (res == CUDA_SUCCESS) {
        s->rdma_writes++;
        s->rdma_write_bytes += len;
    }
    return res;
}

/* Registered into the dispatch table by handlers_exec.c. */
const srv_handler_fn srv_rdma_copy_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_MEMCPY_HTOD_RDMA] = h_memcpy_htod_rdma,
    [PROTO_OP_MEMCPY_DTOH_RDMA] = h_memcpy_dtoh_rdma,
};
