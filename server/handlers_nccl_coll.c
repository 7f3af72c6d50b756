/* Collectives, point-to-point and groups of the NCCL shim on the worker. Collectives come
 * without a reply (NOREPLY, stream-ordered): a failure becomes the communicator's sticky error
 * (ncclCommGetAsyncError, and the result of its next synchronous call), as NCCL's own
 * asynchronous errors are. Each passes the tenant's compute gate like a kernel launch.
 *
 * The per-call path is kept short: one lock round for the record, no driver call beyond NCCL's
 * own and the gate's (the watchdog's event is recorded only when none is pending on that
 * stream), and a device-memory measurement only around a call that can make NCCL allocate: the
 * first of its kind and size class (or peer) on the communicator (nccl_state.c, "Charges").
 *
 * Pairs. NCCL connects a point-to-point pair lazily, inside the ncclGroupEnd of the first send
 * or receive between two ranks, and that connection waits on the host for the peer rank's own
 * group end (NCCL_RUNTIME_CONNECT=0 connects collectives at creation, never send/receive). Ranks
 * of one session are served on one thread: XLA's collective-permute (JAX's ppermute) is a group
 * of a send and a receive per device thread, and the first one's end waited for a peer whose
 * group sat behind it in the session, for ever (issue 29). So when the session comes to hold
 * every rank of a communicator, at the end of a group that made them all (XLA until 2024:
 * ncclCommInitRankConfig per device in one group) or at the poll that adopts the last one made
 * on a creation thread (XLA now: a blocking init per device, each on a thread of a pool), the
 * worker connects every ordered pair of it there, from its one thread, while nobody can be
 * waiting: one group of a 1-byte send and receive between every two ranks (NCCL marks every
 * p2p channel of a peer for connection at its first operation with that peer, whatever its
 * size), then waits for it. The memory this takes is NCCL's for n(n-1) connections, measured
 * and charged to the communicators; nccl_connect_pairs = no turns it off. */
#include <stdlib.h>
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

/* ---- pairs ------------------------------------------------------------------------------ */

/* Connected at creation only for 2 to 8 ranks: one rank needs no pair, and the memory is NCCL's
 * for n(n-1) connections (each its own buffers on every p2p channel), which grows with the
 * square of n; 8 is the most GPUs of one host that one session commonly drives (an HGX board). */
#define PAIRS_MAX_RANKS 8

struct pair_rank {
    ncclComm_t comm;
    CUcontext ctx;
    CUstream st;
    CUdeviceptr buf; /* byte 0 sent; byte PAIRS_MAX_RANKS + p received from rank p */
    uint64_t id;
};

/* Whether record r takes part: made in the open group (group), or adopted from a creation
 * thread and not used yet (no work of its can be queued before the pairs' exchange). */
static bool pairs_member(const struct nccl_rec *r, bool group)
{
    return r->comm != NULL && (group ? r->group_made : r->make == NULL && !r->used);
}

/* The records with the identity of record `first` that take part (pairs_member, under
 * n->lock), by rank, when the session holds every rank of that communicator and it has 2 to
 * PAIRS_MAX_RANKS ranks; else 0. Each record found is marked in `taken` (when not NULL). */
static int pairs_collect(struct srv_nccl *n, size_t first, bool *taken, struct pair_rank *out,
                         bool group)
{
    const struct nccl_rec *r0 = &n->recs[first];
    int nranks = 0, found = 0;

    if (nccl_lib.CommCount(r0->comm, &nranks) != ncclSuccess || nranks < 2 ||
        nranks > PAIRS_MAX_RANKS)
        return 0;
    memset(out, 0, (size_t)nranks * sizeof(*out));
    for (size_t i = 0; i < n->nrecs; i++) {
        const struct nccl_rec *r = &n->recs[i];
        int rank = -1;

        if ((taken != NULL && taken[i]) || !pairs_member(r, group) ||
            memcmp(r->ident, r0->ident, sizeof(r->ident)) != 0)
            continue;
        if (taken != NULL)
            taken[i] = true;
        if (nccl_lib.CommUserRank(r->comm, &rank) != ncclSuccess || rank < 0 || rank >= nranks ||
            out[rank].comm != NULL)
            return 0; /* not one communicator's ranks after all: leave it to NCCL */
        out[rank] = (struct pair_rank){.comm = r->comm, .ctx = r->ctx, .id = r->id};
        found++;
    }
    return found == nranks ? nranks : 0;
}

/* Connect every ordered pair of the n ranks (lock not held). A scratch buffer or stream that
 * cannot be had skips it (logged; the communicator connects lazily, as before); NCCL's failure is
 * returned, for the communicators' sticky error. */
static ncclResult_t pairs_connect(struct srv_session *s, struct pair_rank *p, int n)
{
    ncclResult_t res = ncclSuccess, r;
    int made = 0;

    for (; made < n; made++) {
        s->drv.cuCtxSetCurrent(p[made].ctx);
        if (s->drv.cuStreamCreateWithPriority(&p[made].st, CU_STREAM_NON_BLOCKING, 0) !=
            CUDA_SUCCESS)
            break;
        if (s->drv.cuMemAlloc(&p[made].buf, 2 * PAIRS_MAX_RANKS) != CUDA_SUCCESS) {
            s->drv.cuStreamDestroy(p[made].st);
            break;
        }
    }
    if (made < n) {
        rg_warn("nccl: communicator %llu: no stream or scratch memory to connect its pairs at "
                "creation; they connect at their first send/receive",
                (unsigned long long)p[0].id);
        res = ncclSuccess;
        goto out_free;
    }
    if ((res = nccl_lib.GroupStart()) != ncclSuccess)
        goto out_free;
    for (int i = 0; i < n; i++) {
        s->drv.cuCtxSetCurrent(p[i].ctx);
        for (int q = 0; q < n; q++) {
            void *sb = (void *)(uintptr_t)p[i].buf;
            void *rb = (void *)(uintptr_t)(p[i].buf + PAIRS_MAX_RANKS + (unsigned)q);

            if (q == i)
                continue;
            r = nccl_lib.Send(sb, 1, ncclInt8, q, p[i].comm, (nccl_stream_t)p[i].st);
            res = res == ncclSuccess ? r : res;
            r = nccl_lib.Recv(rb, 1, ncclInt8, q, p[i].comm, (nccl_stream_t)p[i].st);
            res = res == ncclSuccess ? r : res;
        }
    }
    r = nccl_lib.GroupEnd(); /* ends the group whatever went before */
    res = res == ncclSuccess ? r : res;
    for (int i = 0; i < n && res == ncclSuccess; i++) {
        s->drv.cuCtxSetCurrent(p[i].ctx);
        if (s->drv.cuStreamSynchronize(p[i].st) != CUDA_SUCCESS)
            res = ncclUnhandledCudaError;
    }
out_free:
    for (int i = 0; i < made; i++) {
        s->drv.cuCtxSetCurrent(p[i].ctx);
        s->drv.cuMemFree(p[i].buf);
        s->drv.cuStreamDestroy(p[i].st);
    }
    return res;
}

/* Connect the pairs of the k ranks p (lock not held), log it, and settle the records: marked
 * used, and NCCL's failure their sticky error, as a failed collective's would be. measure: the
 * memory it took is measured here and charged to each rank's record (else the caller's measure
 * holds it). */
static void pairs_settle(struct srv_session *s, struct srv_nccl *n, struct pair_rank *p, int k,
                         bool measure)
{
    size_t before[PAIRS_MAX_RANKS] = {0}, after;
    ncclResult_t res;

    for (int q = 0; q < k && measure; q++)
        before[q] = nccl_free_in(s, p[q].ctx);
    res = pairs_connect(s, p, k);
    if (res == ncclSuccess)
        rg_info("nccl: communicator %llu: connected %d point-to-point pairs of %d ranks at "
                "creation (all in this session; nccl_connect_pairs)",
                (unsigned long long)p[0].id, k * (k - 1), k);
    else
        rg_warn("nccl: communicator %llu: connecting its %d ranks' pairs at creation failed: NCCL "
                "error %d",
                (unsigned long long)p[0].id, k, (int)res);
    pthread_mutex_lock(&n->lock);
    for (int q = 0; q < k; q++) {
        struct nccl_rec *r = nccl_rec_find(n, p[q].id);

        if (r == NULL)
            continue;
        r->used = true;
        if (res != ncclSuccess && r->error == ncclSuccess)
            r->error = res;
        after = measure ? nccl_free_in(s, p[q].ctx) : 0;
        if (measure && before[q] > after)
            nccl_rec_grow(s, r, before[q] - after, "its point-to-point pairs");
    }
    pthread_mutex_unlock(&n->lock);
}

/* At the outermost end of a group that made communicators (lock not held; n->group_end_ms
 * still set, so the watchdog bounds it as the group's end; within the group's measure): connect
 * the pairs of each one the session holds whole. */
static void pairs_connect_made(struct srv_session *s, struct srv_nccl *n)
{
    struct pair_rank p[PAIRS_MAX_RANKS];
    size_t nrecs = n->nrecs; /* records come and go only on this thread */
    bool *taken = NULL;

    for (size_t i = 0; i < nrecs; i++) {
        int k = 0;

        /* group_made is written on this thread only: most groups made nothing, and pass with
         * no lock round and no allocation */
        if (!n->recs[i].group_made ||
            (taken == NULL && (taken = calloc(nrecs, sizeof(*taken))) == NULL))
            continue;
        pthread_mutex_lock(&n->lock);
        if (!taken[i] && pairs_member(&n->recs[i], true))
            k = pairs_collect(n, i, taken, p, true);
        pthread_mutex_unlock(&n->lock);
        if (k != 0)
            pairs_settle(s, n, p, k, false);
    }
    free(taken);
}

/* XLA's NcclCollectives makes a clique's communicators each by a blocking init on a thread of
 * its own; through the shim each is a creation thread on the worker, adopted at a poll of the
 * session (nccl_state.c). The poll that adopts the last of them connects the pairs, unless a
 * group is open or one of them was used (its work could wait for a peer's, and the exchange
 * would queue behind it). The exchange runs on the session's thread, as the poll's answer
 * waits, bounded by the watchdog as a group's end is (nccl_timeout). */
void nccl_pairs_adopted(struct srv_session *s, uint64_t id)
{
    struct srv_nccl *n = nccl_state(s);
    struct pair_rank p[PAIRS_MAX_RANKS];
    struct nccl_rec *r;
    CUcontext saved = NULL;
    int k = 0;

    if (!nccl_connect_pairs || n->group_depth > 0)
        return;
    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, id)) != NULL && pairs_member(r, false))
        k = pairs_collect(n, (size_t)(r - n->recs), NULL, p, false);
    pthread_mutex_unlock(&n->lock);
    if (k == 0)
        return;
    s->drv.cuCtxGetCurrent(&saved);
    pthread_mutex_lock(&n->lock);
    n->group_end_ms = nccl_now_ms();
    pthread_mutex_unlock(&n->lock);
    pairs_settle(s, n, p, k, true);
    pthread_mutex_lock(&n->lock);
    n->group_end_ms = 0;
    pthread_mutex_unlock(&n->lock);
    s->drv.cuCtxSetCurrent(saved);
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
        if (last && res == ncclSuccess && nccl_connect_pairs)
            pairs_connect_made(s, n); /* within the group's measure: charged as creation */
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
