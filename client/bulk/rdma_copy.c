/* One-sided bulk copies of pinned host memory on sessions that run on RDMA. Pinned memory
 * (cuMemHostAlloc, cuMemHostRegister) is registered with the session's connection at its first
 * copy of RDMA_COPY_MIN bytes or more, for the whole range, and kept until it is freed or
 * unregistered. Such a copy sends a call naming [address, key, length] instead of bulk bytes:
 * the worker reads (HtoD) or writes (DtoH) the client's memory with RDMA READ/WRITE, and no
 * client CPU touches the data.
 *
 * Ordering is the byte stream's: a synchronous copy returns after the server's reply, which
 * comes after the last READ or WRITE completed. An asynchronous HtoD is read when the worker
 * reaches it, in call order, so before the reply of any later synchronizing call (CUDA lets the
 * source change only once the copy completed in stream order). An asynchronous DtoH goes
 * without a reply: the data is in place before the reply of the next synchronizing call.
 * Because the worker may still read or write a range after the call that named it returned,
 * forgetting a registration first waits for the worker to catch up (cli_session_fence), as
 * cuMemFreeHost synchronizes in CUDA.
 *
 * Pageable memory keeps the byte stream: see docs/rdma-performance.md for why. */
#include "client/objects/address_ranges.h"
#include "client/bulk/bulk.h"
#include "common/log.h"
#include "transport/transport.h"

#define RDMA_COPY_MIN   (64u << 10)
#define HOST_ALLOC_FLAG 0x80000000u /* memory.c: the range came from cuMemHostAlloc */

/* Attached to ranges that could not be registered: they keep the byte stream. */
static char unregistrable;

static bool read_only(const struct mem_range *r)
{
    return !(r->flags & HOST_ALLOC_FLAG) && (r->flags & CU_MEMHOSTREGISTER_READ_ONLY);
}

/* Register the whole pinned range r with conn; attach it (or the one another thread attached
 * first). NULL when it cannot be registered (logged once per range). */
static struct transport_mr *range_register(struct transport_conn *conn, const struct mem_range *r)
{
    unsigned access = TRANSPORT_ACCESS_REMOTE_READ;
    struct transport_mr *mr = NULL;
    void *attached = NULL;

    if (!read_only(r))
        access |= TRANSPORT_ACCESS_REMOTE_WRITE | TRANSPORT_ACCESS_LOCAL_WRITE;
    if (conn->ops->mem_reg(conn, (void *)r->base, r->size, access, &mr) != RG_OK) {
        rg_info("pinned memory at %p (%zu bytes) cannot be registered for RDMA; its copies "
                "go through the byte stream",
                (void *)r->base, r->size);
        mr = NULL;
    }
    if (!addr_range_attach_mr(MEM_HOST, r->base, mr != NULL ? (void *)mr : &unregistrable,
                              &attached)) {
        attached = NULL; /* freed meanwhile: an application error; copy the ordinary way */
    }
    if (mr != NULL && attached != mr)
        mr->ops->mem_dereg(mr);
    return attached == &unregistrable ? NULL : attached;
}

/* The registration covering [p, p + n) when the copy should go one-sided, else NULL. */
static struct transport_mr *pinned_mr(const void *p, size_t n, bool server_writes)
{
    struct transport_conn *conn;
    struct mem_range r;

    if (n < RDMA_COPY_MIN || (conn = cli_session_rdma_conn()) == NULL ||
        !addr_range_find(MEM_HOST, (uintptr_t)p, &r) || n > r.size - ((uintptr_t)p - r.base) ||
        (server_writes && read_only(&r)) || r.mr == &unregistrable)
        return NULL;
    return r.mr != NULL ? r.mr : range_register(conn, &r);
}

static CUresult rdma_copy(unsigned op, uint64_t dev, const void *host, size_t n, uint64_t stream,
                          bool async, bool server_writes)
{
    struct transport_mr *mr = pinned_mr(host, n, server_writes);
    struct cli_call call = {CLI_ARGS_AS(op, MEMCPY_HTOD_RDMA, .dptr = dev, .size = n,
                                        .stream = stream, .async = async,
                                        .raddr = (uintptr_t)host)};

    if (mr == NULL)
        return CLI_RDMA_NOT_TAKEN;
    call.a.MEMCPY_HTOD_RDMA.rkey = mr->key;
    return async ? cli_call_async(&call) : cli_call_sync(&call);
}

CUresult cli_rdma_htod(CUdeviceptr dst, const void *src, size_t n, uint64_t stream, bool async)
{
    return rdma_copy(PROTO_OP_MEMCPY_HTOD_RDMA, dst, src, n, stream, async, false);
}

CUresult cli_rdma_dtoh(void *dst, CUdeviceptr src, size_t n, uint64_t stream, bool async)
{
    return rdma_copy(PROTO_OP_MEMCPY_DTOH_RDMA, src, dst, n, stream, async, true);
}

void cli_rdma_forget(void *mr)
{
    struct transport_mr *m = mr;

    if (m == NULL || mr == (void *)&unregistrable)
        return;
    cli_session_fence(NULL,
                      cli_ctx_current_id()); /* the worker may still read or write the range */
    m->ops->mem_dereg(m);
}
