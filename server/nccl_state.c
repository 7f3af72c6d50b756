/* The session's communicators on the worker: their records, their creation and what they are
 * charged, and the end of the session.
 *
 * Creation. NCCL's ncclCommInitRank (and Split, Shrink) returns only when every rank has
 * joined. Ranks of one session (one process driving several devices, as XLA and DataParallel
 * do) arrive one after another on the session's single call stream, so a blocking creation for
 * device 0 would wait for device 1's, which sits behind it. Asked with `async`, the worker runs
 * the creation on a thread of its own, in the call's context, and answers ncclInProgress at once;
 * the shim polls NCCL_ASYNC_ERROR (each poll a short call, so the other threads' calls pass in
 * between) until it is done, and the record adopts the communicator then. Inside an open group
 * NCCL itself defers creation to ncclGroupEnd, which runs every rank of the group together.
 *
 * Charges. The device memory a creation takes is measured around it (cuMemGetInfo) and charged
 * to the quota; so is what NCCL allocates later, measured around the calls that can make it
 * allocate: the first collective of each kind and size class (a new algorithm's connections and
 * buffers), the first exchange with each peer, a group's end that holds such a call, buffer
 * registration and windows. Over the quota the communicator is aborted (docs/nccl.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/nccl_internal.h"

struct nccl_make {
    struct nccl_make_args a; /* ids and exclude are the make's own copies */
    struct srv_session *s;
    CUcontext ctx;
    pthread_t thread;
    atomic_int done;
    ncclComm_t comm;
    ncclResult_t res;
    size_t before, after;
};

uint64_t nccl_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct srv_nccl *nccl_state(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_NCCL);
}

static rg_status_t nccl_init(struct srv_session *s, void *state)
{
    struct srv_nccl *n = state;

    n->s = s;
    return pthread_mutex_init(&n->lock, NULL) == 0 ? RG_OK : RG_ERR_NOMEM;
}

struct nccl_rec *nccl_rec_find(struct srv_nccl *n, uint64_t id)
{
    for (size_t i = 0; n != NULL && i < n->nrecs; i++)
        if (n->recs[i].id == id)
            return &n->recs[i];
    return NULL;
}

size_t nccl_free_in(struct srv_session *s, CUcontext ctx)
{
    CUcontext saved = NULL;
    size_t free_b = 0, total = 0;

    s->drv.cuCtxGetCurrent(&saved);
    if (saved != ctx)
        s->drv.cuCtxSetCurrent(ctx);
    if (s->drv.cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS)
        free_b = 0;
    if (saved != ctx)
        s->drv.cuCtxSetCurrent(saved);
    return free_b;
}

void nccl_rec_abort(struct srv_nccl *n, struct nccl_rec *r, ncclResult_t why)
{
    (void)n;
    if (r->comm == NULL)
        return;
    nccl_lib.CommAbort(r->comm);
    r->comm = NULL; /* its registrations went with it; their charges go at the drop */
    if (r->error == ncclSuccess)
        r->error = why;
}

void nccl_rec_grow(struct srv_session *s, struct nccl_rec *r, uint64_t took, const char *what)
{
    if (took == 0 || r->comm == NULL)
        return;
    if (srv_quota_charge(s, took)) {
        r->charged += took;
        rg_debug("nccl: communicator %llu took %llu bytes more (%s)", (unsigned long long)r->id,
                 (unsigned long long)took, what);
        return;
    }
    rg_warn("nccl: communicator %llu took %llu bytes of device memory more (%s), over the "
            "quota; aborting it and the session's other ranks of it",
            (unsigned long long)r->id, (unsigned long long)took, what);
    nccl_rec_abort_clique(nccl_state(s), r, ncclUnhandledCudaError);
}

void nccl_rec_abort_clique(struct srv_nccl *n, struct nccl_rec *r, ncclResult_t why)
{
    uint8_t ident[RG_SHA256_LEN];

    memcpy(ident, r->ident, sizeof(ident));
    nccl_rec_abort(n, r, why);
    for (size_t i = 0; i < n->nrecs; i++)
        if (n->recs[i].comm != NULL && memcmp(n->recs[i].ident, ident, sizeof(ident)) == 0)
            nccl_rec_abort(n, &n->recs[i], why);
}

static void start_watchdog(struct srv_nccl *n)
{
    if (!n->watching)
        n->watching = pthread_create(&n->watchdog, NULL, nccl_watchdog_main, n) == 0;
}

struct nccl_rec *nccl_rec_add(struct srv_session *s, uint64_t id, ncclComm_t comm, uint64_t charged)
{
    struct srv_nccl *n = nccl_state(s);
    struct nccl_rec r = {.id = id, .comm = comm, .charged = charged, .live_fd = -1};
    struct nccl_rec *out = NULL;

    s->drv.cuCtxGetCurrent(&r.ctx);
    if (s->drv.cuEventCreate(&r.done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        r.done = NULL;
    pthread_mutex_lock(&n->lock);
    if (n->nrecs == n->rec_cap) {
        size_t cap = n->rec_cap ? 2 * n->rec_cap : 8;
        struct nccl_rec *recs = realloc(n->recs, cap * sizeof(*recs));

        if (recs != NULL)
            n->recs = recs, n->rec_cap = cap;
    }
    if (n->nrecs < n->rec_cap) {
        out = &n->recs[n->nrecs++];
        *out = r;
        start_watchdog(n);
    }
    pthread_mutex_unlock(&n->lock);
    if (out == NULL) {
        if (r.done != NULL)
            s->drv.cuEventDestroy(r.done);
        if (comm != NULL)
            nccl_lib.CommAbort(comm);
        srv_quota_release(s, charged);
    }
    return out;
}

void nccl_rec_drop(struct srv_nccl *n, struct nccl_rec *r, bool graceful)
{
    struct srv_session *s = n->s;

    if (r->done != NULL)
        s->drv.cuEventDestroy(r->done);
    if (r->live_fd >= 0)
        nccl_live_close(r->live_fd, r->ident, r->rank, graceful);
    for (size_t i = 0; i < r->nregs; i++)
        srv_quota_release(s, r->regs[i].charged);
    free(r->regs);
    srv_quota_release(s, r->charged);
    *r = n->recs[--n->nrecs];
}

/* ---- creation --------------------------------------------------------------------------- */

static ncclResult_t make_run(struct nccl_make_args *a, ncclComm_t *comm)
{
    switch (a->how) {
    case NCCL_MAKE_INIT:
        if (a->nids == 1)
            return nccl_lib.CommInitRankConfig(comm, a->nranks, a->ids[0], a->rank, a->configp);
        return nccl_lib.CommInitRankScalable(comm, a->nranks, a->rank, a->nids, a->ids, a->configp);
    case NCCL_MAKE_SPLIT:
        return nccl_lib.CommSplit(a->parent, a->color, a->key, comm, a->configp);
    default:
        return nccl_lib.CommShrink(a->parent, a->exclude, a->nexclude, comm, a->configp, a->flags);
    }
}

/* r adopts comm, made with result res after the device's free memory went from `before` to
 * `after` (under n->lock). Returns the result for the application: over the quota the new
 * communicator is aborted and the answer is ncclUnhandledCudaError. */
static ncclResult_t adopt(struct srv_session *s, struct nccl_rec *r, const struct nccl_make_args *a,
                          ncclResult_t res, ncclComm_t comm, size_t before, size_t after)
{
    uint64_t took = before > after ? before - after : 0;

    memcpy(r->ident, a->ident, sizeof(r->ident));
    if (res != ncclSuccess || comm == NULL) {
        r->error = res;
        return res;
    }
    if (!srv_quota_charge(s, took)) {
        rg_warn("nccl: communicator %llu took %llu bytes of device memory, over the quota",
                (unsigned long long)r->id, (unsigned long long)took);
        nccl_lib.CommAbort(comm);
        r->error = ncclUnhandledCudaError;
        return ncclUnhandledCudaError;
    }
    r->charged = took;
    r->comm = comm;
    if (nccl_lib.CommCount(comm, &r->nranks) != ncclSuccess ||
        nccl_lib.CommUserRank(comm, &r->rank) != ncclSuccess)
        r->nranks = a->nranks, r->rank = a->rank;
    r->live_fd = nccl_live_open(r->ident, r->rank);
    return ncclSuccess;
}

static void make_free(struct nccl_make *m)
{
    free(m->a.ids);
    free(m->a.exclude);
    free(m);
}

static void *make_main(void *arg)
{
    struct nccl_make *m = arg;

    m->s->drv.cuCtxSetCurrent(m->ctx);
    m->before = nccl_free_in(m->s, m->ctx);
    m->res = make_run(&m->a, &m->comm);
    m->after = nccl_free_in(m->s, m->ctx);
    atomic_store(&m->done, 1);
    return NULL;
}

/* A copy of a that outlives the call (the config points into the copy). */
static struct nccl_make *make_copy(const struct nccl_make_args *a)
{
    struct nccl_make *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->a = *a;
    m->a.ids = NULL;
    m->a.exclude = NULL;
    if (a->configp != NULL)
        m->a.configp = &m->a.config;
    if ((a->nids > 0 && (m->a.ids = malloc((size_t)a->nids * sizeof(*a->ids))) == NULL) ||
        (a->nexclude > 0 && (m->a.exclude = malloc((size_t)a->nexclude * sizeof(int))) == NULL)) {
        make_free(m);
        return NULL;
    }
    if (a->nids > 0)
        memcpy(m->a.ids, a->ids, (size_t)a->nids * sizeof(*a->ids));
    if (a->nexclude > 0)
        memcpy(m->a.exclude, a->exclude, (size_t)a->nexclude * sizeof(int));
    return m;
}

static CUresult answer(struct srv_call *call, ncclResult_t res, int nranks, int rank)
{
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)(uint32_t)nranks;
    call->out[call->nout++] = (uint64_t)(uint32_t)rank;
    return CUDA_SUCCESS;
}

CUresult nccl_make(struct srv_session *s, struct srv_call *call, uint64_t id,
                   struct nccl_make_args *a, bool async)
{
    struct srv_nccl *n = nccl_state(s);
    struct nccl_make *m;
    struct nccl_rec *r;
    ncclComm_t comm = NULL;
    ncclResult_t res;
    size_t before, after;
    CUcontext ctx = NULL;

    pthread_mutex_lock(&n->lock);
    r = nccl_rec_find(n, id);
    pthread_mutex_unlock(&n->lock);
    if (r != NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    s->drv.cuCtxGetCurrent(&ctx);
    if (n->group_depth > 0) { /* NCCL makes it at the group's end, with the group's others */
        res = make_run(a, &comm);
        if (res == ncclSuccess && comm != NULL) {
            if ((r = nccl_rec_add(s, id, comm, 0)) == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
            pthread_mutex_lock(&n->lock);
            memcpy(r->ident, a->ident, sizeof(r->ident));
            r->group_made = true;
            r->nranks = a->how == NCCL_MAKE_INIT ? a->nranks : -1; /* known at the end */
            r->rank = a->how == NCCL_MAKE_INIT ? a->rank : -1;
            pthread_mutex_unlock(&n->lock);
            return answer(call, res, r->nranks, r->rank);
        }
        return answer(call, res, 0, 0);
    }
    if (!async) {
        before = nccl_free_in(s, ctx);
        res = make_run(a, &comm);
        after = nccl_free_in(s, ctx);
        if (res != ncclSuccess || comm == NULL)
            return answer(call, res, 0, 0);
        if ((r = nccl_rec_add(s, id, NULL, 0)) == NULL) {
            nccl_lib.CommAbort(comm);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_mutex_lock(&n->lock);
        res = adopt(s, r, a, res, comm, before, after);
        if (res != ncclSuccess) { /* over the quota: on the wire as before protocol 1.3 */
            nccl_rec_drop(n, r, true);
            pthread_mutex_unlock(&n->lock);
            call->out[call->nout++] = (uint64_t)ncclSuccess;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        int nranks = r->nranks, rank = r->rank;
        pthread_mutex_unlock(&n->lock);
        return answer(call, ncclSuccess, nranks, rank);
    }
    if ((m = make_copy(a)) == NULL || (r = nccl_rec_add(s, id, NULL, 0)) == NULL) {
        if (m != NULL)
            make_free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->s = s;
    m->ctx = ctx;
    if (pthread_create(&m->thread, NULL, make_main, m) != 0) {
        make_free(m);
        pthread_mutex_lock(&n->lock);
        nccl_rec_drop(n, r, true);
        pthread_mutex_unlock(&n->lock);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    pthread_mutex_lock(&n->lock);
    r->make = m;
    pthread_mutex_unlock(&n->lock);
    return answer(call, ncclInProgress, 0, 0);
}

bool nccl_make_poll(struct srv_session *s, struct nccl_rec *r)
{
    struct nccl_make *m = r->make;

    if (m == NULL)
        return false;
    if (!atomic_load(&m->done))
        return true;
    pthread_join(m->thread, NULL);
    r->make = NULL;
    if (adopt(s, r, &m->a, m->res, m->comm, m->before, m->after) == ncclSuccess)
        rg_debug("nccl: communicator %llu made (rank %d of %d)", (unsigned long long)r->id, r->rank,
                 r->nranks);
    make_free(m);
    return false;
}

ncclComm_t nccl_comm_of(struct srv_session *s, struct srv_call *call, uint64_t id)
{
    struct srv_nccl *n = nccl_state(s);
    struct nccl_rec *r;
    ncclComm_t comm = NULL;
    ncclResult_t why = ncclInvalidArgument;
    struct nccl_make *m;

    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, id)) != NULL && (m = r->make) != NULL) {
        pthread_mutex_unlock(&n->lock); /* used before its creation was seen done: wait */
        while (!atomic_load(&m->done))
            usleep(200);
        pthread_mutex_lock(&n->lock);
        if ((r = nccl_rec_find(n, id)) != NULL)
            nccl_make_poll(s, r);
    }
    if (r != NULL && (comm = r->comm) == NULL)
        why = r->error != ncclSuccess ? r->error : ncclInvalidArgument;
    else if (r != NULL)
        r->used = true; /* work of its may be queued: its pairs are left to NCCL */
    pthread_mutex_unlock(&n->lock);
    if (comm == NULL)
        call->out[call->nout++] = (uint64_t)why;
    return comm;
}

/* ---- the end of the session ------------------------------------------------------------- */

/* A creation thread still waiting for peers that never come: abort what NCCL made so far is not
 * possible from here, so wait a bounded time and leave it to the process's exit. */
static void make_reap(struct nccl_make *m)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    if (pthread_timedjoin_np(m->thread, NULL, &until) != 0) {
        rg_warn("nccl: a communicator's creation still waits for its peers at the session's "
                "end; left to the worker's exit");
        pthread_detach(m->thread);
        return;
    }
    if (m->comm != NULL)
        nccl_lib.CommAbort(m->comm);
    make_free(m);
}

/* The end of the session, while its contexts live: stop the watchdog, abort every
 * communicator (peers may be gone, so never a blocking destroy), free NCCL memory, give the
 * quota back. */
static void nccl_teardown(struct srv_session *s, void *state)
{
    struct srv_nccl *n = state;
    size_t ncomms, nmems, bytes = 0;
    pthread_mutex_lock(&n->lock);
    n->stop = true;
    pthread_mutex_unlock(&n->lock);
    if (n->watching)
        pthread_join(n->watchdog, NULL);
    ncomms = n->nrecs;
    nmems = n->nmems;
    while (n->nrecs > 0) {
        struct nccl_rec *r = &n->recs[n->nrecs - 1];

        if (r->make != NULL)
            make_reap(r->make);
        if (r->comm != NULL && s->drv.cuCtxSetCurrent(r->ctx) == CUDA_SUCCESS)
            nccl_lib.CommAbort(r->comm);
        r->comm = NULL;
        bytes += r->charged;
        for (size_t i = 0; i < r->nregs; i++)
            bytes += r->regs[i].charged;
        /* Not graceful: a peer still inside a collective with this rank learns it is gone. */
        nccl_rec_drop(n, r, false);
    }
    for (size_t i = 0; i < n->nmems; i++) {
        nccl_lib.MemFree(n->mems[i].ptr);
        bytes += n->mems[i].size;
        srv_quota_release(s, n->mems[i].size);
    }
    if (ncomms + nmems > 0)
        rg_info("nccl: session end: aborted %zu communicator(s), freed %zu NCCL allocation(s), "
                "%zu bytes of quota given back",
                ncomms, nmems, bytes);
    pthread_mutex_destroy(&n->lock);
    free(n->recs);
    free(n->mems);
    n->recs = NULL;
    n->mems = NULL;
    n->nrecs = n->nmems = 0;
}

const struct srv_component srv_nccl_component = {.name = "nccl",
                                                 .state_size = sizeof(struct srv_nccl),
                                                 .init = nccl_init,
                                                 .teardown = nccl_teardown};
