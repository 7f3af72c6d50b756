/* Collectives, point-to-point and groups of the NCCL shim on the worker. Collectives come
 * without a reply (NOREPLY, stream-ordered): a failure becomes the communicator's sticky error
 * (ncclCommGetAsyncError, and the result of its next synchronous call), as NCCL's own
 * asynchronous errors are. Each passes the tenant's compute gate like a kernel launch.
 *
 * The per-call path is kept short: one lock round for the record, no driver call beyond NCCL's
 * own and the gate's (the watchdog's event is recorded only when none is pending on that
 * stream), and a device-memory measurement only around a call that can make NCCL allocate: the
 * first of its kind and size class (or peer) on the communicator (nccl_state.c, "Charges"). */
#include <string.h>

#include "common/log.h"
#include "server/nccl_internal.h"

/* The bit of seen[kind] for this call: log2 of its bytes, or the peer of a send/recv. */
static uint64_t size_class(const struct proto_args_NCCL_COLL *a)
{
    uint64_t bytes = a->count * nccl_type_size((int)a->type);
    int c = 0;

    if (a->kind == NCCL_WIRE_SEND || a->kind == NCCL_WIRE_RECV)
        return 1ull << ((uint32_t)a->root & 63);
    while (bytes > 1 && c < 63)
        bytes >>= 1, c++;
    return 1ull << c;
}

static ncclResult_t coll_run(ncclComm_t comm, const struct proto_args_NCCL_COLL *a, CUstream st)
{
    const void *sb = (const void *)(uintptr_t)a->sendbuf;
    void *rb = (void *)(uintptr_t)a->recvbuf;
    size_t count = a->count;
    ncclDataType_t t = (ncclDataType_t)a->type;
    ncclRedOp_t op = (ncclRedOp_t)(uint32_t)a->op;
    int root = (int)(uint32_t)a->root;
    nccl_stream_t stream = (nccl_stream_t)st;

    switch (a->kind) {
    case NCCL_WIRE_ALL_REDUCE:
        return nccl_lib.AllReduce(sb, rb, count, t, op, comm, stream);
    case NCCL_WIRE_BROADCAST:
        return nccl_lib.Broadcast(sb, rb, count, t, root, comm, stream);
    case NCCL_WIRE_REDUCE:
        return nccl_lib.Reduce(sb, rb, count, t, op, root, comm, stream);
    case NCCL_WIRE_ALL_GATHER:
        return nccl_lib.AllGather(sb, rb, count, t, comm, stream);
    case NCCL_WIRE_REDUCE_SCATTER:
        return nccl_lib.ReduceScatter(sb, rb, count, t, op, comm, stream);
    case NCCL_WIRE_SEND:
        return nccl_lib.Send(sb, count, t, root, comm, stream);
    case NCCL_WIRE_RECV:
        return nccl_lib.Recv(rb, count, t, root, comm, stream);
    /* NCCL 2.28's: an older NCCL lacks them, and answers as it would not have the call. */
    case NCCL_WIRE_ALLTOALL:
        return nccl_lib.AlltoAll != NULL ? nccl_lib.AlltoAll(sb, rb, count, t, comm, stream)
                                         : ncclInvalidUsage;
    case NCCL_WIRE_GATHER:
        return nccl_lib.Gather != NULL ? nccl_lib.Gather(sb, rb, count, t, root, comm, stream)
                                       : ncclInvalidUsage;
    default:
        return nccl_lib.Scatter != NULL ? nccl_lib.Scatter(sb, rb, count, t, root, comm, stream)
                                        : ncclInvalidUsage;
    }
}

CUresult srv_op_nccl_coll(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COLL *a = SRV_ARGS(call, NCCL_COLL);
    struct srv_gate_ticket tk;
    struct srv_nccl *n;
    struct nccl_rec *r;
    ncclComm_t comm = NULL;
    ncclResult_t res;
    CUstream st;
    uint64_t id = a->comm, cls;
    size_t before = 0;
    bool measure = false;

    if (a->kind >= NCCL_WIRE_COLL_COUNT || a->type >= ncclNumTypes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!nccl_lib_ready(s) || (n = nccl_state(s)) == NULL)
        return CUDA_SUCCESS; /* nothing to attach an error to: the next synchronous call says */
    cls = size_class(a);
    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, id)) != NULL && r->make != NULL) {
        pthread_mutex_unlock(&n->lock); /* used before its creation was seen done: wait */
        nccl_comm_of(s, call, id);
        call->nout = 0;
        pthread_mutex_lock(&n->lock);
        r = nccl_rec_find(n, id);
    }
    if (r != NULL && (comm = r->comm) != NULL) {
        r->in_call_ms = nccl_now_ms();
        measure = !(r->seen[a->kind] & cls);
        r->seen[a->kind] |= cls;
    }
    pthread_mutex_unlock(&n->lock);
    call->nout = 0;
    if (comm == NULL) /* none, or aborted: its sticky error answers the next synchronous call */
        return CUDA_SUCCESS;
    if (measure && n->group_depth > 0)
        n->group_grows = true, measure = false; /* NCCL allocates at the group's end */
    if (measure)
        before = nccl_free_in(s, r->ctx);
    srv_gate_begin(s, st, &tk); /* the tenant's compute share, as for kernels */
    res = coll_run(comm, a, st);
    srv_gate_end(s, st, &tk, res == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED);
    size_t after = measure ? nccl_free_in(s, r->ctx) : 0;
    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, id)) != NULL) {
        r->in_call_ms = 0;
        if (res != ncclSuccess && res != ncclInProgress && r->error == ncclSuccess) {
            rg_warn("nccl: collective %u on communicator %llu failed: NCCL error %d",
                    (unsigned)a->kind, (unsigned long long)id, (int)res);
            r->error = res;
        }
        if (measure && before > after)
            nccl_rec_grow(s, r, before - after, "a first collective of its size");
        if (n->group_depth > 0) /* its kernel starts at the group's end */
            r->grouped = st, r->in_group = true;
        else
            nccl_rec_mark(s, r, st);
    }
    pthread_mutex_unlock(&n->lock);
    call->nout = 0;
    return CUDA_SUCCESS;
}

/* Per context of the open group's communicators that may grow: free memory, to measure the
 * group's end (at most 16 contexts; more are left unmeasured). */
struct group_measure {
    CUcontext ctx[16];
    size_t before[16];
    int n;
};

static void group_measure_begin(struct srv_session *s, struct srv_nccl *n, struct group_measure *g)
{
    g->n = 0;
    for (size_t i = 0; i < n->nrecs; i++) {
        struct nccl_rec *r = &n->recs[i];
        int k = 0;

        if (!(r->group_made || (n->group_grows && r->in_group)))
            continue;
        while (k < g->n && g->ctx[k] != r->ctx)
            k++;
        if (k == g->n && g->n < 16) {
            g->ctx[g->n] = r->ctx;
            g->before[g->n++] = nccl_free_in(s, r->ctx);
        }
    }
}

/* Charge what the group took on each context to its first communicator there that took part. */
static void group_measure_end(struct srv_session *s, struct srv_nccl *n, struct group_measure *g)
{
    for (int k = 0; k < g->n; k++) {
        size_t after = nccl_free_in(s, g->ctx[k]);
        uint64_t took = g->before[k] > after ? g->before[k] - after : 0;

        for (size_t i = 0; i < n->nrecs && took > 0; i++) {
            struct nccl_rec *r = &n->recs[i];

            if (r->ctx != g->ctx[k] || !(r->group_made || r->in_group) || r->comm == NULL)
                continue;
            nccl_rec_grow(s, r, took, r->group_made ? "its creation in a group" : "a group");
            took = 0;
        }
    }
}

/* The open group ended (or was simulated away): made communicators learn their place and get
 * their liveness file, grouped work gets the watchdog's event (under n->lock). */
static void group_closed(struct srv_session *s, struct srv_nccl *n, bool launched)
{
    for (size_t i = 0; i < n->nrecs; i++) {
        struct nccl_rec *r = &n->recs[i];

        if (r->group_made && r->comm != NULL) {
            r->group_made = false;
            if (nccl_lib.CommCount(r->comm, &r->nranks) == ncclSuccess &&
                nccl_lib.CommUserRank(r->comm, &r->rank) == ncclSuccess && r->live_fd < 0)
                r->live_fd = nccl_live_open(r->ident, r->rank);
        }
        if (r->in_group) {
            r->in_group = false;
            if (launched)
                nccl_rec_mark(s, r, r->grouped);
        }
    }
    n->group_grows = false;
}

CUresult srv_op_nccl_group(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_GROUP *a = SRV_ARGS(call, NCCL_GROUP);
    struct group_measure g = {.n = 0};
    struct srv_nccl *n;
    ncclResult_t res;
    CUcontext saved = NULL;

    call->nout = 0;
    if (!nccl_lib_ready(s) || (n = nccl_state(s)) == NULL)
        return CUDA_SUCCESS;
    if (a->start) {
        res = nccl_lib.GroupStart();
        n->group_depth += res == ncclSuccess;
    } else {
        bool last = n->group_depth == 1;

        s->drv.cuCtxGetCurrent(&saved);
        pthread_mutex_lock(&n->lock);
        n->group_end_ms = nccl_now_ms();
        if (last)
            group_measure_begin(s, n, &g);
        pthread_mutex_unlock(&n->lock);
        res = nccl_lib.GroupEnd();
        pthread_mutex_lock(&n->lock);
        n->group_end_ms = 0;
        if (n->group_depth > 0 && --n->group_depth == 0) {
            group_measure_end(s, n, &g);
            group_closed(s, n, true);
        }
        pthread_mutex_unlock(&n->lock);
        s->drv.cuCtxSetCurrent(saved); /* NCCL set each device of the group current in turn */
    }
    if (res != ncclSuccess && res != ncclInProgress)
        rg_warn("nccl: ncclGroup%s failed: NCCL error %d", a->start ? "Start" : "End", (int)res);
    return CUDA_SUCCESS;
}

/* ncclGroupSimulateEnd: the group ends without being launched; out: result, the estimate. */
CUresult srv_op_nccl_group_simulate(struct srv_session *s, struct srv_call *call)
{
    ncclSimInfo_t info = {sizeof(info), NCCL_SIM_INFO_MAGIC, (unsigned)NCCL_ABI_VERSION(2, 28, 0),
                          -1.0f};
    struct srv_nccl *n;
    ncclResult_t res;
    uint32_t bits;

    if (!nccl_lib_ready(s) || (n = nccl_state(s)) == NULL) {
        call->out[call->nout++] = (uint64_t)ncclSystemError;
        return CUDA_SUCCESS;
    }
    if (nccl_lib.GroupSimulateEnd == NULL) {
        call->out[call->nout++] = (uint64_t)ncclInvalidUsage;
        return CUDA_SUCCESS;
    }
    res = nccl_lib.GroupSimulateEnd(&info);
    pthread_mutex_lock(&n->lock);
    if (n->group_depth > 0 && --n->group_depth == 0)
        group_closed(s, n, false);
    pthread_mutex_unlock(&n->lock);
    memcpy(&bits, &info.estimatedTime, sizeof(bits));
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = bits;
    return CUDA_SUCCESS;
}
