/* One-sided bulk copies on sessions that run on RDMA (proto/ops.h MEMCPY_HTOD_RDMA and
 * MEMCPY_DTOH_RDMA). The client names its registered pinned memory [address, key, length].
 *
 * GPUDirect RDMA, where the host can: the worker registers the device allocation itself with
 * the connection (a dmabuf from cuMemGetHandleForAddressRange, ibv_reg_dmabuf_mr through the
 * transport's mem_reg_dmabuf) and RDMA-READs the client's memory straight into device memory
 * or RDMA-WRITEs it from there: no staging, no device copy. The NIC's access bypasses the
 * GPU's streams, so the copy first waits until the work it follows in stream order has
 * completed (direct_fence). Registrations are kept per allocation until it is freed.
 *
 * Otherwise through the two staging buffers, which are registered with the session's
 * connection once, so that the NIC moving chunk k overlaps the copy engine moving chunk k-1
 * (HtoD) or k+1 (DtoH). Either way the reply follows the last READ or WRITE, so a synchronous
 * copy is complete when the client sees it.
 *
 * The NIC checks the key, bounds and access of every request against the client's
 * registration; a refusal breaks the connection (transport/rdma.h), which ends this session
 * only (the worker's next send fails). Here the call itself is checked: a size that is 0,
 * an address range that wraps, a key wider than 32 bits. Device memory is registered for
 * local access only: the client never gets a key to it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/array_grow.h"
#include "common/log.h"
#include "server/session.h"
#include "transport/transport.h"

/* A device allocation registered with the connection for GPUDirect RDMA; mr NULL: it could
 * not be, its copies go through staging. */
struct srv_direct_reg {
    CUdeviceptr dptr;
    size_t size;
    struct transport_mr *mr;
};

/* The component's state. */
struct rdma_copy_state {
    struct transport_mr *staging_mr[2];         /* the staging buffers' registration */
    uint64_t rdma_reads, rdma_writes;           /* one-sided copies done */
    uint64_t rdma_read_bytes, rdma_write_bytes; /* and the bytes they moved */
    int rdma_direct;   /* GPUDirect RDMA: 0 not decided yet (first one-sided copy), 1 on, -1 off */
    bool direct_flush; /* a GPU needs cuFlushGPUDirectRDMAWrites after the NIC wrote into it */
    struct srv_direct_reg *direct_regs; /* registered allocations */
    size_t ndirect, direct_cap;
    uint64_t direct_reads, direct_writes;           /* of the one-sided copies: those that went */
    uint64_t direct_read_bytes, direct_write_bytes; /* straight to or from device memory */
};

static struct rdma_copy_state *rdma_of(const struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_RDMA_COPY);
}

/* The staging buffers, registered with the connection for local writes (READ lands there). */
static CUresult staging_registered(struct srv_session *s)
{
    struct srv_staging *stg = srv_staging_of(s);
    struct rdma_copy_state *r = rdma_of(s);
    CUresult res = srv_staging_ready(s);

    for (int i = 0; i < 2 && res == CUDA_SUCCESS; i++) {
        if (r->staging_mr[i] != NULL)
            continue;
        if (s->conn->ops->mem_reg(s->conn, stg->buf[i], stg->len, TRANSPORT_ACCESS_LOCAL_WRITE,
                                  &r->staging_mr[i]) != RG_OK)
            res = CUDA_ERROR_OUT_OF_MEMORY; /* the transport logged why */
    }
    return res;
}

/* ---- GPUDirect RDMA: device allocations registered with the connection ------------------ */

static int direct_config = 1; /* srv_rdma_direct_configure */
static const char *direct_off_by;

void srv_rdma_direct_configure(const char *value)
{
    const char *env = getenv("RGPU_RDMA_DIRECT");

    if (value != NULL && strcmp(value, "off") == 0)
        direct_off_by = "rdma_direct = off in the config";
    else if (env != NULL && (strcmp(env, "0") == 0 || strcmp(env, "off") == 0))
        direct_off_by = "RGPU_RDMA_DIRECT=0";
    direct_config = direct_off_by == NULL;
}

static void direct_drop(struct srv_direct_reg *r)
{
    if (r->mr != NULL)
        r->mr->ops->mem_dereg(r->mr);
}

void srv_rdma_direct_forget(struct srv_session *s, CUdeviceptr dptr)
{
    struct rdma_copy_state *r = rdma_of(s);

    for (size_t i = 0; i < r->ndirect; i++)
        if (r->direct_regs[i].dptr == dptr) {
            direct_drop(&r->direct_regs[i]);
            r->direct_regs[i] = r->direct_regs[--r->ndirect];
            return;
        }
}

static void direct_release_all(struct srv_session *s)
{
    struct rdma_copy_state *r = rdma_of(s);

    for (size_t i = 0; i < r->ndirect; i++)
        direct_drop(&r->direct_regs[i]);
    free(r->direct_regs);
    r->direct_regs = NULL;
    r->ndirect = r->direct_cap = 0;
}

void srv_rdma_staging_release(struct srv_session *s)
{
    struct rdma_copy_state *r = rdma_of(s);

    direct_release_all(s);
    for (int i = 0; i < 2; i++) {
        if (r->staging_mr[i] != NULL)
            r->staging_mr[i]->ops->mem_dereg(r->staging_mr[i]);
        r->staging_mr[i] = NULL;
    }
}

/* Can GPU i export device memory, and are the NIC's writes into it visible to the device's
 * later work once they completed (ordered by the device, or by cuFlushGPUDirectRDMAWrites,
 * then called after each direct HtoD)? NULL if so, else why not. */
static const char *direct_gpu_refused(struct srv_session *s, int i, char *why, size_t len)
{
    struct rdma_copy_state *r = rdma_of(s);
    int dmabuf = 0, order = 0, flush = 0;
    CUdevice dev = s->devices[i];

    if (s->drv.cuDeviceGetAttribute(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) ||
        s->drv.cuDeviceGetAttribute(&order, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
                                    dev) ||
        s->drv.cuDeviceGetAttribute(&flush,
                                    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, dev))
        dmabuf = 0;
    if (dmabuf == 0)
        snprintf(why, len,
                 "GPU %d cannot export device memory as a dmabuf "
                 "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0)",
                 i);
    else if (order < CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER &&
             !(flush & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST))
        snprintf(why, len, "GPU %d neither orders remote writes nor can flush them", i);
    else {
        r->direct_flush |= order < CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER;
        return NULL;
    }
    return why;
}

/* Why this session cannot go direct before trying a registration; NULL if it may. */
static const char *direct_refused(struct srv_session *s, char *why, size_t len)
{
    const char *refused = NULL;

    if (!direct_config)
        return direct_off_by;
    for (int i = 0; i < s->ndevices && refused == NULL; i++)
        refused = direct_gpu_refused(s, i, why, len);
    return refused;
}

/* Register allocation a (the dmabuf covers its host pages; the region exactly the allocation,
 * addressed by its device addresses). NULL with the reason in why. */
static struct transport_mr *direct_register(struct srv_session *s, const struct srv_alloc *a,
                                            char *why, size_t len)
{
    CUdeviceptr page = (CUdeviceptr)sysconf(_SC_PAGESIZE);
    CUdeviceptr lo = a->dptr & ~(page - 1), hi = (a->dptr + a->size + page - 1) & ~(page - 1);
    struct transport_mr *mr = NULL;
    const char *name = "?";
    int fd = -1, err;
    rg_status_t st;
    CUresult res = s->drv.cuMemGetHandleForAddressRange(&fd, lo, hi - lo,
                                                        CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);

    if (res != CUDA_SUCCESS) {
        s->drv.cuGetErrorName(res, &name);
        snprintf(why, len, "cuMemGetHandleForAddressRange gave no dmabuf for %#llx+%llu: %s",
                 (unsigned long long)lo, (unsigned long long)(hi - lo), name);
        return NULL;
    }
    st = s->conn->ops->mem_reg_dmabuf(s->conn, fd, a->dptr - lo, a->size, a->dptr,
                                      TRANSPORT_ACCESS_LOCAL_WRITE, &mr);
    err = errno;
    close(fd); /* the registration holds the dmabuf */
    if (st == RG_ERR_UNSUPPORTED)
        snprintf(why, len, "this host's libibverbs has no ibv_reg_dmabuf_mr");
    else if (st != RG_OK)
        snprintf(why, len, "ibv_reg_dmabuf_mr of %zu bytes of device memory failed: %s", a->size,
                 strerror(err));
    return st == RG_OK ? mr : NULL;
}

static bool direct_add(struct srv_session *s, const struct srv_alloc *a, struct transport_mr *mr)
{
    struct rdma_copy_state *r = rdma_of(s);

    if (!rg_array_grow((void **)&r->direct_regs, &r->direct_cap, r->ndirect,
                       sizeof(*r->direct_regs), 16))
        return false;
    r->direct_regs[r->ndirect++] = (struct srv_direct_reg){a->dptr, a->size, mr};
    return true;
}

/* The session's first one-sided copy decides whether it can go direct at all: one line. */
static void direct_decide(struct srv_session *s, const char *why)
{
    struct rdma_copy_state *r = rdma_of(s);

    r->rdma_direct = why == NULL ? 1 : -1;
    if (why == NULL)
        rg_info("session %llu: one-sided copies go straight to and from device memory "
                "(GPUDirect RDMA: device memory registered with the NIC as a dmabuf)",
                (unsigned long long)s->id);
    else
        rg_info("session %llu: one-sided copies go through host staging (no GPUDirect RDMA: "
                "%s)",
                (unsigned long long)s->id, why);
}

/* The registration covering [d, d + len) when this copy can go direct, else NULL (also when
 * no allocation of the table holds the range: VMM, graph memory, a bad range go through
 * staging, where the driver checks the range). */
static struct transport_mr *direct_mr(struct srv_session *s, CUdeviceptr d, size_t len)
{
    struct rdma_copy_state *r = rdma_of(s);
    const struct srv_alloc *a;
    const char *refused;
    struct transport_mr *mr;
    char why[200];

    if (r->rdma_direct == 0 && (refused = direct_refused(s, why, sizeof(why))) != NULL)
        direct_decide(s, refused);
    if (r->rdma_direct < 0 || (a = srv_alloc_find(s, d, len)) == NULL)
        return NULL;
    for (size_t i = 0; i < r->ndirect; i++)
        if (r->direct_regs[i].dptr == a->dptr && r->direct_regs[i].size == a->size)
            return r->direct_regs[i].mr;
    mr = direct_register(s, a, why, sizeof(why));
    if (r->rdma_direct == 0)
        direct_decide(s, mr != NULL ? NULL : why);
    else if (mr == NULL)
        rg_debug("session %llu: allocation %#llx (%zu bytes) goes through staging: %s",
                 (unsigned long long)s->id, (unsigned long long)a->dptr, a->size, why);
    if (r->rdma_direct > 0 && !direct_add(s, a, mr)) { /* a failure is remembered too */
        if (mr != NULL)
            mr->ops->mem_dereg(mr);
        mr = NULL;
    }
    return mr;
}

/* Until the work that a copy issued on stream now would follow has completed: an event
 * recorded there takes the stream's own dependencies (the legacy stream's on every blocking
 * stream, a blocking stream's on the legacy stream), which cuStreamSynchronize alone would
 * not wait for. */
static CUresult direct_fence(struct srv_session *s, CUstream stream)
{
    CUevent ev;
    CUresult res = s->drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);

    if (res != CUDA_SUCCESS)
        return res;
    res = s->drv.cuEventRecordWithFlags(ev, stream, 0);
    if (res == CUDA_SUCCESS)
        res = s->drv.cuEventSynchronize(ev);
    s->drv.cuEventDestroy(ev);
    return res;
}

static void report(const struct srv_session *s)
{
    struct rdma_copy_state *r = rdma_of(s);

    if (r->rdma_reads + r->rdma_writes > 0)
        rg_info("session %llu: one-sided copies: %llu HtoD (%llu bytes by RDMA READ), %llu DtoH "
                "(%llu bytes by RDMA WRITE)",
                (unsigned long long)s->id, (unsigned long long)r->rdma_reads,
                (unsigned long long)r->rdma_read_bytes, (unsigned long long)r->rdma_writes,
                (unsigned long long)r->rdma_write_bytes);
    if (r->rdma_direct > 0)
        rg_info("session %llu: GPUDirect RDMA: %llu HtoD (%llu bytes) and %llu DtoH (%llu bytes) "
                "straight to and from device memory; %llu bytes through staging",
                (unsigned long long)s->id, (unsigned long long)r->direct_reads,
                (unsigned long long)r->direct_read_bytes, (unsigned long long)r->direct_writes,
                (unsigned long long)r->direct_write_bytes,
                (unsigned long long)(r->rdma_read_bytes + r->rdma_write_bytes -
                                     r->direct_read_bytes - r->direct_write_bytes));
}

/* Checks common to both directions; the stream in *stream_p. */
static CUresult rdma_call_ok(struct srv_session *s, struct srv_call *call, CUstream *stream_p)
{
    const struct proto_args_MEMCPY_HTOD_RDMA *a = SRV_ARGS(call, MEMCPY_HTOD_RDMA);
    if (!(s->conn->ops->caps & TRANSPORT_CAP_ONE_SIDED)) {
        rg_warn("session %llu: %s on a session that does not run on RDMA",
                (unsigned long long)s->id, proto_op_name(call->msg->op));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (a->size == 0 || a->raddr + a->size < a->raddr || a->rkey > UINT32_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    return srv_stream(s, a->stream, stream_p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A READ or WRITE of the client's memory failed: the connection is gone, so is the session. */
static CUresult io_result(struct srv_session *s, bool write, bool direct, uint64_t raddr,
                          uint32_t rkey, size_t n, rg_status_t st)
{
    if (st == RG_OK)
        return CUDA_SUCCESS;
    rg_error("session %llu: RDMA %s of the client's memory at %#llx (+%zu, key %#x%s) failed: "
             "%s; ending the session",
             (unsigned long long)s->id, write ? "WRITE" : "READ", (unsigned long long)raddr, n,
             rkey, direct ? ", direct to device memory" : "",
             st == RG_ERR_INVALID ? "the client refused the key, range or access"
                                  : rg_status_str(st));
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* A READ or WRITE of n bytes at offset off of the client's range the call named. */
static CUresult remote_io(struct srv_session *s, struct srv_call *call, bool write, int k,
                          size_t off, size_t n)
{
    struct srv_staging *stg = srv_staging_of(s);
    struct rdma_copy_state *r = rdma_of(s);
    const struct proto_args_MEMCPY_HTOD_RDMA *a = SRV_ARGS(call, MEMCPY_HTOD_RDMA);
    uint64_t raddr = a->raddr + off;
    uint32_t rkey = (uint32_t)a->rkey;
    rg_status_t st;

    if (off > a->size || n > a->size - off || n > stg->len) /* never outside the call's range */
        return CUDA_ERROR_INVALID_VALUE;
    st = write ? s->conn->ops->write(s->conn, r->staging_mr[k], stg->buf[k], raddr, rkey, n)
               : s->conn->ops->read(s->conn, r->staging_mr[k], stg->buf[k], raddr, rkey, n);
    return io_result(s, write, false, raddr, rkey, n, st);
}

/* A one-sided copy of len bytes done (for the report at the session's end). */
static void count_copy(struct srv_session *s, bool write, bool direct, size_t len)
{
    struct rdma_copy_state *r = rdma_of(s);

    if (write) {
        r->rdma_writes++;
        r->rdma_write_bytes += len;
        r->direct_writes += direct;
        r->direct_write_bytes += direct ? len : 0;
    } else {
        r->rdma_reads++;
        r->rdma_read_bytes += len;
        r->direct_reads += direct;
        r->direct_read_bytes += direct ? len : 0;
    }
}

/* The whole copy between the client's memory and device memory, after its stream's earlier
 * work. An HtoD's bytes are made visible to the device's later work before the reply (a no-op
 * where the device orders remote writes itself). */
static CUresult direct_copy(struct srv_session *s, struct srv_call *call, CUstream stream,
                            struct transport_mr *mr, bool write)
{
    struct rdma_copy_state *r = rdma_of(s);
    const struct proto_args_MEMCPY_HTOD_RDMA *a = SRV_ARGS(call, MEMCPY_HTOD_RDMA);
    void *dev = (void *)(uintptr_t)a->dptr;
    size_t len = a->size;
    rg_status_t st;
    CUresult res = direct_fence(s, stream);

    if (res != CUDA_SUCCESS)
        return res;
    st = write ? s->conn->ops->write(s->conn, mr, dev, a->raddr, (uint32_t)a->rkey, len)
               : s->conn->ops->read(s->conn, mr, dev, a->raddr, (uint32_t)a->rkey, len);
    if ((res = io_result(s, write, true, a->raddr, (uint32_t)a->rkey, len, st)) != CUDA_SUCCESS)
        return res;
    if (!write && r->direct_flush)
        res = s->drv.cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                                CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    if (res == CUDA_SUCCESS)
        count_copy(s, write, true, len);
    return res;
}

/* [dst, size, stream, async, raddr, rkey]: READ chunk k while chunk k-1 is copied to the
 * device; chunk k-2 (same buffer) was waited for before chunk k-1 was issued. */
CUresult srv_op_memcpy_htod_rdma(struct srv_session *s, struct srv_call *call)
{
    struct srv_staging *stg = srv_staging_of(s);
    const struct proto_args_MEMCPY_HTOD_RDMA *a = SRV_ARGS(call, MEMCPY_HTOD_RDMA);
    CUdeviceptr dst = a->dptr;
    size_t len = a->size, n;
    CUstream stream;
    CUresult res = rdma_call_ok(s, call, &stream);
    struct transport_mr *dev_mr;

    if (res == CUDA_SUCCESS && (dev_mr = direct_mr(s, dst, len)) != NULL)
        return direct_copy(s, call, stream, dev_mr, false);
    if (res == CUDA_SUCCESS)
        res = staging_registered(s);
    for (size_t off = 0, k = 0; res == CUDA_SUCCESS && off < len; off += n, k ^= 1) {
        n = len - off < stg->len ? len - off : stg->len;
        if ((res = remote_io(s, call, false, (int)k, off, n)) != CUDA_SUCCESS)
            return res;
        res = s->drv.cuStreamSynchronize(stream);
        if (res == CUDA_SUCCESS)
            res = s->drv.cuMemcpyHtoDAsync(dst + off, stg->buf[k], n, stream);
    }
    if (res == CUDA_SUCCESS)
        res = s->drv.cuStreamSynchronize(stream);
    if (res == CUDA_SUCCESS)
        count_copy(s, false, false, len);
    return res;
}

/* [src, size, stream, async, raddr, rkey]: WRITE chunk k while chunk k+1 is copied from the
 * device into the other buffer; the reply (or nothing, for NOREPLY) follows the last WRITE. */
CUresult srv_op_memcpy_dtoh_rdma(struct srv_session *s, struct srv_call *call)
{
    struct srv_staging *stg = srv_staging_of(s);
    const struct proto_args_MEMCPY_DTOH_RDMA *a = SRV_ARGS(call, MEMCPY_DTOH_RDMA);
    CUdeviceptr src = a->dptr;
    size_t len = a->size, n = 0, next;
    CUstream stream;
    CUresult res = rdma_call_ok(s, call, &stream);
    struct transport_mr *dev_mr;

    if (res == CUDA_SUCCESS && (dev_mr = direct_mr(s, src, len)) != NULL)
        return direct_copy(s, call, stream, dev_mr, true);
    if (res == CUDA_SUCCESS && (res = staging_registered(s)) == CUDA_SUCCESS) {
        n = len < stg->len ? len : stg->len;
        res = s->drv.cuMemcpyDtoHAsync(stg->buf[0], src, n, stream);
    }
    if (res == CUDA_SUCCESS)
        res = s->drv.cuStreamSynchronize(stream);
    for (size_t off = 0, k = 0; res == CUDA_SUCCESS && off < len; off += n, n = next, k ^= 1) {
        next = len - off - n < stg->len ? len - off - n : stg->len;
        if (next > 0)
            res = s->drv.cuMemcpyDtoHAsync(stg->buf[k ^ 1], src + off + n, next, stream);
        if (remote_io(s, call, true, (int)k, off, n) != CUDA_SUCCESS)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        if (next > 0 && res == CUDA_SUCCESS)
            res = s->drv.cuStreamSynchronize(stream);
    }
    if (res == CUDA_SUCCESS)
        count_copy(s, true, false, len);
    return res;
}

/* What the session moved one-sided, then its registrations, before the memory they cover. */
static void rdma_copy_teardown(struct srv_session *s, void *state)
{
    report(s);
    srv_rdma_staging_release(s);
}

const struct srv_component srv_rdma_copy_component = {.name = "rdma_copy",
                                                      .state_size = sizeof(struct rdma_copy_state),
                                                      .teardown = rdma_copy_teardown};
