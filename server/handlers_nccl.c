/* NCCL operations of the NCCL shim (proto/ops.def NCCL_*), run with the GPU host's real NCCL
 * (nccl_library, dlopen'ed at the first call) in the session's context, on its streams, in
 * call order. Communicators are the session's: charged to its quota (device memory measured
 * around their creation), their collectives pass the compute gate like kernels, and a watchdog
 * thread aborts one whose async error is set or whose collective stays unfinished longer than
 * nccl_timeout, so a dead peer makes the others fail instead of hanging. docs/nccl.md. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/secret.h"
#include "common/sha256.h"
#include "nccl/nccl_abi.h"
#include "nccl/nccl_wire.h"
#include "server/nccl.h"
#include "server/tenancy.h"

struct nccl_lib {
    nccl_get_version_fn GetVersion;
    nccl_get_unique_id_fn GetUniqueId;
    nccl_init_rank_config_fn CommInitRankConfig;
    nccl_split_fn CommSplit;
    nccl_comm_fn CommFinalize, CommDestroy, CommAbort;
    nccl_async_error_fn CommGetAsyncError;
    nccl_comm_int_fn CommCount, CommUserRank;
    nccl_all_reduce_fn AllReduce;
    nccl_broadcast_fn Broadcast;
    nccl_reduce_fn Reduce;
    nccl_all_gather_fn AllGather;
    nccl_reduce_scatter_fn ReduceScatter;
    nccl_send_fn Send;
    nccl_recv_fn Recv;
    nccl_group_fn GroupStart, GroupEnd;
    nccl_mem_alloc_fn MemAlloc;
    nccl_mem_free_fn MemFree;
    nccl_register_fn CommRegister;
    nccl_deregister_fn CommDeregister;
    nccl_premulsum_fn RedOpCreatePreMulSum;
    nccl_redop_destroy_fn RedOpDestroy;
    int version;
};

static struct nccl_lib lib;
static int lib_state; /* 0 not tried, 1 loaded, -1 failed (logged once) */
static char lib_path[256] = "libnccl.so.2";
static uint8_t key_base[RG_SHA256_LEN]; /* SHA-256 of nccl_secret */
static unsigned timeout_ms = 600000;
static const struct srv_tenants *tenants;

struct nccl_rec {
    uint64_t id;
    ncclComm_t comm;      /* NULL once aborted */
    CUcontext ctx;        /* the context it was created in */
    CUevent done;         /* recorded after its latest collective (NULL: could not create) */
    uint64_t charged;     /* bytes of the quota its creation took */
    ncclResult_t error;   /* sticky: a collective's failure, or why the watchdog aborted it */
    uint64_t in_call_ms;  /* a collective call has been running since (0: none) */
    uint64_t recorded_ms; /* when `done` was last recorded (0: nothing pending) */
    CUstream grouped;     /* a stream it has work on inside the open group (launched at its end) */
    bool in_group;
};

struct nccl_mem {
    void *ptr;
    size_t size;
};

struct srv_nccl {
    pthread_mutex_t lock; /* recs against the watchdog */
    struct nccl_rec *recs;
    size_t nrecs, rec_cap;
    struct nccl_mem *mems;
    size_t nmems, mem_cap;
    struct srv_driver *drv;
    uint64_t group_end_ms; /* an ncclGroupEnd has been running since (0: none) */
    int group_depth;       /* ncclGroupStart calls not yet ended */
    pthread_t watchdog;
    bool watching, stop;
};

void srv_nccl_configure(const struct srv_config *cfg)
{
    if (cfg->nccl_library[0] != '\0')
        snprintf(lib_path, sizeof(lib_path), "%s", cfg->nccl_library);
    rg_sha256(cfg->nccl_secret, strlen(cfg->nccl_secret), key_base);
    if (atoi(cfg->nccl_timeout) > 0)
        timeout_ms = (unsigned)atoi(cfg->nccl_timeout) * 1000u;
    tenants = &cfg->tenants;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the library ------------------------------------------------------------------------ */

static bool lib_bind(void *dl)
{
#define BIND(f) (*(void **)&lib.f = dlsym(dl, "nccl" #f)) != NULL
    return BIND(GetVersion) && BIND(GetUniqueId) && BIND(CommInitRankConfig) &&
           BIND(CommSplit) && BIND(CommFinalize) && BIND(CommDestroy) && BIND(CommAbort) &&
           BIND(CommGetAsyncError) && BIND(CommCount) && BIND(CommUserRank) &&
           BIND(AllReduce) && BIND(Broadcast) && BIND(Reduce) && BIND(AllGather) &&
           BIND(ReduceScatter) && BIND(Send) && BIND(Recv) && BIND(GroupStart) &&
           BIND(GroupEnd) && BIND(MemAlloc) && BIND(MemFree) && BIND(CommRegister) &&
           BIND(CommDeregister) && BIND(RedOpCreatePreMulSum) && BIND(RedOpDestroy);
#undef BIND
}

static bool lib_ready(void)
{
    void *dl;

    if (lib_state != 0)
        return lib_state > 0;
    lib_state = -1;
    if ((dl = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        rg_error("nccl: cannot load %s (nccl_library): %s", lib_path, dlerror());
        return false;
    }
    if (dlsym(dl, "rgpuNcclShim") != NULL) {
        rg_error("nccl: %s is rgpu's own NCCL shim, not the GPU host's NCCL; set nccl_library",
                 lib_path);
        return false;
    }
    if (!lib_bind(dl) || lib.GetVersion(&lib.version) != ncclSuccess) {
        rg_error("nccl: %s lacks an NCCL entry point rgpu needs: %s", lib_path, dlerror());
        return false;
    }
    rg_info("nccl: %s, version %d", lib_path, lib.version);
    lib_state = 1;
    return true;
}

/* ---- unique ids bound to the tenant ------------------------------------------------------- */

/* MAC over the id's NCCL part with the key SHA-256(nccl_secret's hash, tenant, its token hash):
 * a worker of another tenant, or of a server with another secret, computes another one. */
static void id_mac(const struct srv_session *s, const uint8_t *id, uint8_t mac[RG_SHA256_LEN])
{
    const struct srv_tenant *t = NULL;
    struct rg_sha256 c;
    uint8_t token[RG_SHA256_LEN] = {0};

    for (int i = 0; tenants != NULL && i < tenants->n && t == NULL; i++)
        if (strcmp(tenants->list[i].name, s->tenant) == 0)
            t = &tenants->list[i];
    if (t != NULL && t->hashed)
        memcpy(token, t->token_sha256, sizeof(token));
    else if (t != NULL)
        rg_sha256(t->token, strlen(t->token), token);
    rg_sha256_init(&c);
    rg_sha256_update(&c, "rgpu-nccl-id", 12);
    rg_sha256_update(&c, key_base, sizeof(key_base));
    rg_sha256_update(&c, s->tenant, strlen(s->tenant) + 1);
    rg_sha256_update(&c, token, sizeof(token));
    rg_sha256_update(&c, id, NCCL_WIRE_MAC_OFFSET);
    rg_sha256_final(&c, mac);
}

static bool id_check(const struct srv_session *s, ncclUniqueId *id)
{
    uint8_t mac[RG_SHA256_LEN];
    uint8_t *tail = (uint8_t *)id->internal + NCCL_WIRE_MAC_OFFSET;
    bool ok;

    id_mac(s, (const uint8_t *)id->internal, mac);
    ok = rg_secret_equal(mac, tail, NCCL_WIRE_MAC_LEN);
    memset(tail, 0, NCCL_WIRE_MAC_LEN);
    return ok;
}

/* ---- session state ---------------------------------------------------------------------- */

static struct srv_nccl *state(struct srv_session *s)
{
    struct srv_nccl *n = s->nccl;

    if (n == NULL && (n = calloc(1, sizeof(*n))) != NULL) {
        pthread_mutex_init(&n->lock, NULL);
        n->drv = &s->drv;
        s->nccl = n;
    }
    return n;
}

/* The live record of comm id (under n->lock), or NULL. */
static struct nccl_rec *rec_find(struct srv_nccl *n, uint64_t id)
{
    for (size_t i = 0; n != NULL && i < n->nrecs; i++)
        if (n->recs[i].id == id)
            return &n->recs[i];
    return NULL;
}

static void rec_drop(struct srv_session *s, struct srv_nccl *n, struct nccl_rec *r)
{
    if (r->done != NULL)
        s->drv.cuEventDestroy(r->done);
    srv_quota_release(s, r->charged);
    *r = n->recs[--n->nrecs];
}

/* Abort r's communicator (under n->lock): NCCL frees it and its kernels stop waiting. */
static void rec_abort(struct srv_nccl *n, struct nccl_rec *r, ncclResult_t why)
{
    if (r->comm == NULL)
        return;
    lib.CommAbort(r->comm);
    r->comm = NULL;
    if (r->error == ncclSuccess)
        r->error = why;
}

static void watch_one(struct srv_nccl *n, struct nccl_rec *r, uint64_t now)
{
    ncclResult_t e = ncclSuccess;

    if (lib.CommGetAsyncError(r->comm, &e) == ncclSuccess && e != ncclSuccess &&
        e != ncclInProgress) {
        rg_error("nccl: communicator %llu failed (NCCL error %d: a peer died or the network "
                 "failed); aborting it", (unsigned long long)r->id, (int)e);
        rec_abort(n, r, e);
        return;
    }
    if (r->in_call_ms != 0 && now - r->in_call_ms > timeout_ms) {
        rg_error("nccl: a collective of communicator %llu has not returned for %u s "
                 "(nccl_timeout); aborting it", (unsigned long long)r->id, timeout_ms / 1000);
        rec_abort(n, r, ncclSystemError);
        return;
    }
    if (r->recorded_ms == 0 || r->done == NULL || n->drv->cuCtxSetCurrent(r->ctx) != CUDA_SUCCESS)
        return;
    if (n->drv->cuEventQuery(r->done) != CUDA_ERROR_NOT_READY)
        r->recorded_ms = 0;
    else if (now - r->recorded_ms > timeout_ms) {
        rg_error("nccl: communicator %llu: its collectives have not finished for %u s "
                 "(nccl_timeout); aborting it", (unsigned long long)r->id, timeout_ms / 1000);
        rec_abort(n, r, ncclSystemError);
    }
}

static void *watchdog(void *arg)
{
    struct srv_nccl *n = arg;
    const struct timespec tick = {0, 50 * 1000 * 1000};

    for (;;) {
        pthread_mutex_lock(&n->lock);
        if (n->stop) {
            pthread_mutex_unlock(&n->lock);
            return NULL;
        }
        /* A group's end may wait for peers of any of the session's communicators. */
        bool group_stuck = n->group_end_ms != 0 && now_ms() - n->group_end_ms > timeout_ms;

        if (group_stuck)
            rg_error("nccl: an ncclGroupEnd has not returned for %u s (nccl_timeout); aborting "
                     "the session's communicators", timeout_ms / 1000);
        for (size_t i = 0; i < n->nrecs; i++)
            if (n->recs[i].comm != NULL && group_stuck)
                rec_abort(n, &n->recs[i], ncclSystemError);
            else if (n->recs[i].comm != NULL)
                watch_one(n, &n->recs[i], now_ms());
        if (group_stuck)
            n->group_end_ms = 0;
        pthread_mutex_unlock(&n->lock);
        nanosleep(&tick, NULL);
    }
}

/* Record a new communicator (its creation charged `charged` bytes); starts the watchdog. */
static CUresult rec_add(struct srv_session *s, uint64_t id, ncclComm_t comm, uint64_t charged)
{
    struct srv_nccl *n = s->nccl;
    struct nccl_rec r = {.id = id, .comm = comm, .charged = charged};
    CUresult res = CUDA_SUCCESS;

    s->drv.cuCtxGetCurrent(&r.ctx);
    if (s->drv.cuEventCreate(&r.done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        r.done = NULL;
    pthread_mutex_lock(&n->lock);
    if (n->nrecs == n->rec_cap) {
        size_t cap = n->rec_cap ? 2 * n->rec_cap : 8;
        struct nccl_rec *recs = realloc(n->recs, cap * sizeof(*recs));

        if (recs == NULL)
            res = CUDA_ERROR_OUT_OF_MEMORY;
        else
            n->recs = recs, n->rec_cap = cap;
    }
    if (res == CUDA_SUCCESS)
        n->recs[n->nrecs++] = r;
    if (res == CUDA_SUCCESS && !n->watching)
        n->watching = pthread_create(&n->watchdog, NULL, watchdog, n) == 0;
    pthread_mutex_unlock(&n->lock);
    if (res != CUDA_SUCCESS) {
        if (r.done != NULL)
            s->drv.cuEventDestroy(r.done);
        lib.CommAbort(comm);
        srv_quota_release(s, charged);
    }
    return res;
}

/* After NCCL created comm (res): charge what it took of device memory since `before`
 * (NCCL's buffers), or abort it when that is over the quota. */
static CUresult comm_adopt(struct srv_session *s, struct srv_call *call, uint64_t id,
                           ncclResult_t res, ncclComm_t comm, size_t before)
{
    size_t after = srv_mem_free_now(s);
    uint64_t took = before > after ? before - after : 0;

    call->out[call->nout++] = (uint64_t)res;
    if (res != ncclSuccess || comm == NULL)
        return CUDA_SUCCESS;
    if (!srv_quota_charge(s, took)) {
        rg_warn("nccl: communicator %llu took %llu bytes of device memory, over the quota",
                (unsigned long long)id, (unsigned long long)took);
        lib.CommAbort(comm);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rec_add(s, id, comm, took);
}

/* ---- handlers ----------------------------------------------------------------------------- */

static bool ready(struct srv_session *s, struct srv_call *call)
{
    if (lib_ready() && state(s) != NULL)
        return true;
    call->out[call->nout++] = (uint64_t)ncclSystemError;
    return false;
}

CUresult srv_op_nccl_version(struct srv_session *s, struct srv_call *call)
{
    if (!ready(s, call))
        return CUDA_SUCCESS;
    call->out[call->nout++] = ncclSuccess;
    call->out[call->nout++] = (uint64_t)lib.version;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_unique_id(struct srv_session *s, struct srv_call *call)
{
    static ncclUniqueId id;
    uint8_t *tail = (uint8_t *)id.internal + NCCL_WIRE_MAC_OFFSET;
    ncclResult_t res;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    memset(&id, 0, sizeof(id));
    if ((res = lib.GetUniqueId(&id)) == ncclSuccess) {
        for (int i = 0; i < NCCL_WIRE_MAC_LEN; i++)
            if (tail[i] != 0) {
                rg_error("nccl: %s fills the whole unique id; rgpu cannot bind it to a tenant",
                         lib_path);
                res = ncclInternalError;
                break;
            }
    }
    call->out[call->nout++] = (uint64_t)res;
    if (res == ncclSuccess) {
        id_mac(s, (const uint8_t *)id.internal, tail);
        call->rdata = id.internal;
        call->rdata_len = sizeof(id.internal);
    }
    return CUDA_SUCCESS;
}

/* The application's config words as an ncclConfig_t of NCCL 2.18's layout (the members up to
 * splitShare; NCCL reads a config only as far as its version says, so a newer library takes it
 * with the later members unset), blocking (the worker waits; the shim's call is synchronous).
 * NULL when the application set none of them: NCCL's defaults. */
static ncclConfig_t *config_of(const uint64_t *w, ncclConfig_t *c)
{
    bool any = false;

    for (int i = 1; i < NCCL_WIRE_CONFIG_WORDS; i++)
        any = any || (int)(uint32_t)w[i] != NCCL_CONFIG_UNDEF_INT;
    if (!any)
        return NULL;
    memset(c, 0, sizeof(*c));
    c->size = offsetof(ncclConfig_t, trafficClass);
    c->magic = NCCL_CONFIG_MAGIC;
    c->version = NCCL_ABI_VERSION(2, 18, 0);
    c->blocking = 1;
    c->cgaClusterSize = (int)(uint32_t)w[1];
    c->minCTAs = (int)(uint32_t)w[2];
    c->maxCTAs = (int)(uint32_t)w[3];
    c->splitShare = (int)(uint32_t)w[4];
    return c;
}

CUresult srv_op_nccl_comm_init(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_INIT *a = SRV_ARGS(call, NCCL_COMM_INIT);
    ncclUniqueId id;
    ncclConfig_t config;
    ncclComm_t comm = NULL;
    ncclResult_t res;
    size_t before;

    if (call->msg->data.len != sizeof(id) || a->comm == 0 || a->nranks == 0 ||
        a->nranks > INT32_MAX || a->rank >= a->nranks)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call))
        return CUDA_SUCCESS;
    memcpy(&id, call->msg->data.data, sizeof(id));
    if (!id_check(s, &id)) {
        rg_error("nccl: a unique id not made for tenant '%s' was refused (communicator %llu)",
                 s->tenant, (unsigned long long)a->comm);
        call->out[call->nout++] = (uint64_t)ncclInvalidArgument;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&s->nccl->lock);
    bool taken = rec_find(s->nccl, a->comm) != NULL;
    pthread_mutex_unlock(&s->nccl->lock);
    if (taken)
        return CUDA_ERROR_INVALID_HANDLE;
    before = srv_mem_free_now(s);
    res = lib.CommInitRankConfig(&comm, (int)a->nranks, id, (int)a->rank,
                                 config_of(a->config, &config));
    return comm_adopt(s, call, a->comm, res, comm, before);
}

/* The live communicator of id, NULL (and out[0] its sticky error or ncclInvalidArgument). */
static ncclComm_t comm_of(struct srv_session *s, struct srv_call *call, uint64_t id)
{
    struct nccl_rec *r;
    ncclComm_t comm = NULL;
    ncclResult_t why = ncclInvalidArgument;

    pthread_mutex_lock(&s->nccl->lock);
    if ((r = rec_find(s->nccl, id)) != NULL && (comm = r->comm) == NULL)
        why = r->error;
    pthread_mutex_unlock(&s->nccl->lock);
    if (comm == NULL)
        call->out[call->nout++] = (uint64_t)why;
    return comm;
}

CUresult srv_op_nccl_comm_split(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_SPLIT *a = SRV_ARGS(call, NCCL_COMM_SPLIT);
    ncclConfig_t config;
    ncclComm_t parent, comm = NULL;
    int nranks = 0, rank = 0;
    ncclResult_t made;
    size_t before;
    CUresult res;

    if (!ready(s, call) || (parent = comm_of(s, call, a->parent)) == NULL)
        return CUDA_SUCCESS;
    if (a->comm == 0)
        return CUDA_ERROR_INVALID_VALUE;
    before = srv_mem_free_now(s);
    made = lib.CommSplit(parent, (int)(uint32_t)a->color, (int)(uint32_t)a->key, &comm,
                         config_of(a->config, &config));
    res = comm_adopt(s, call, a->comm, made, comm, before);
    if (res == CUDA_SUCCESS && call->out[0] == ncclSuccess && comm != NULL) {
        lib.CommCount(comm, &nranks);
        lib.CommUserRank(comm, &rank);
    }
    call->out[call->nout++] = (uint64_t)nranks;
    call->out[call->nout++] = (uint64_t)rank;
    return res;
}

/* A communicator with an async error (a peer is gone) is aborted rather than destroyed: a
 * destroy would wait for that peer, with the watchdog locked out. */
static bool comm_failed(ncclComm_t comm)
{
    ncclResult_t e = ncclSuccess;

    return lib.CommGetAsyncError(comm, &e) == ncclSuccess && e != ncclSuccess &&
           e != ncclInProgress;
}

CUresult srv_op_nccl_comm_end(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_END *a = SRV_ARGS(call, NCCL_COMM_END);
    struct srv_nccl *n = state(s);
    struct nccl_rec *r;
    ncclResult_t res = ncclInvalidArgument;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&n->lock);
    if ((r = rec_find(n, a->comm)) != NULL) {
        if (r->comm == NULL) /* aborted by the watchdog: NCCL already freed it */
            res = a->how == NCCL_WIRE_FINALIZE ? r->error : ncclSuccess;
        else if (a->how == NCCL_WIRE_FINALIZE)
            res = lib.CommFinalize(r->comm);
        else if (a->how == NCCL_WIRE_DESTROY && !comm_failed(r->comm))
            res = lib.CommDestroy(r->comm);
        else
            res = lib.CommAbort(r->comm);
        if (a->how != NCCL_WIRE_FINALIZE)
            rec_drop(s, n, r);
    }
    pthread_mutex_unlock(&n->lock);
    call->out[call->nout++] = (uint64_t)res;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_async_error(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_ASYNC_ERROR *a = SRV_ARGS(call, NCCL_ASYNC_ERROR);
    struct nccl_rec *r;
    ncclResult_t res = ncclInvalidArgument, e = ncclSuccess;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&s->nccl->lock);
    if ((r = rec_find(s->nccl, a->comm)) != NULL) {
        res = ncclSuccess;
        e = r->error;
        if (e == ncclSuccess && r->comm != NULL)
            res = lib.CommGetAsyncError(r->comm, &e);
    }
    pthread_mutex_unlock(&s->nccl->lock);
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)e;
    return CUDA_SUCCESS;
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
    case NCCL_WIRE_ALL_REDUCE: return lib.AllReduce(sb, rb, count, t, op, comm, stream);
    case NCCL_WIRE_BROADCAST: return lib.Broadcast(sb, rb, count, t, root, comm, stream);
    case NCCL_WIRE_REDUCE: return lib.Reduce(sb, rb, count, t, op, root, comm, stream);
    case NCCL_WIRE_ALL_GATHER: return lib.AllGather(sb, rb, count, t, comm, stream);
    case NCCL_WIRE_REDUCE_SCATTER: return lib.ReduceScatter(sb, rb, count, t, op, comm, stream);
    case NCCL_WIRE_SEND: return lib.Send(sb, count, t, root, comm, stream);
    default: return lib.Recv(rb, count, t, root, comm, stream);
    }
}

/* After r's latest work on st, for the watchdog (under the lock). */
static void rec_mark(struct srv_session *s, struct nccl_rec *r, CUstream st)
{
    if (r->comm != NULL && r->done != NULL &&
        s->drv.cuEventRecordWithFlags(r->done, st, 0) == CUDA_SUCCESS)
        r->recorded_ms = now_ms();
}

/* A failure becomes the communicator's sticky error (ncclCommGetAsyncError, and the result of
 * its next synchronous call), as NCCL's own asynchronous errors are. */
CUresult srv_op_nccl_coll(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COLL *a = SRV_ARGS(call, NCCL_COLL);
    struct srv_gate_ticket tk;
    struct nccl_rec *r;
    ncclComm_t comm;
    ncclResult_t res;
    CUstream st;
    uint64_t id = a->comm;

    if (a->kind >= NCCL_WIRE_COLL_COUNT || a->type >= ncclNumTypes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!ready(s, call) || (comm = comm_of(s, call, id)) == NULL)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&s->nccl->lock);
    if ((r = rec_find(s->nccl, id)) != NULL)
        r->in_call_ms = now_ms();
    pthread_mutex_unlock(&s->nccl->lock);
    srv_gate_begin(s, st, &tk); /* the tenant's compute share, as for kernels */
    res = coll_run(comm, a, st);
    srv_gate_end(s, st, &tk, res == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED);
    pthread_mutex_lock(&s->nccl->lock);
    if ((r = rec_find(s->nccl, id)) != NULL) {
        r->in_call_ms = 0;
        if (res != ncclSuccess && res != ncclInProgress && r->error == ncclSuccess) {
            rg_warn("nccl: collective %u on communicator %llu failed: NCCL error %d",
                    (unsigned)a->kind, (unsigned long long)id, (int)res);
            r->error = res;
        }
        if (s->nccl->group_depth > 0) /* its kernel starts at the group's end */
            r->grouped = st, r->in_group = true;
        else
            rec_mark(s, r, st);
    }
    pthread_mutex_unlock(&s->nccl->lock);
    call->nout = 0;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_group(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_GROUP *a = SRV_ARGS(call, NCCL_GROUP);
    struct srv_nccl *n;
    ncclResult_t res;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = s->nccl;
    if (a->start) {
        res = lib.GroupStart();
        n->group_depth += res == ncclSuccess;
    } else {
        pthread_mutex_lock(&n->lock);
        n->group_end_ms = now_ms();
        pthread_mutex_unlock(&n->lock);
        res = lib.GroupEnd();
        pthread_mutex_lock(&n->lock);
        n->group_end_ms = 0;
        if (n->group_depth > 0 && --n->group_depth == 0)
            for (size_t i = 0; i < n->nrecs; i++)
                if (n->recs[i].in_group) {
                    n->recs[i].in_group = false;
                    rec_mark(s, &n->recs[i], n->recs[i].grouped);
                }
        pthread_mutex_unlock(&n->lock);
    }
    if (res != ncclSuccess && res != ncclInProgress)
        rg_warn("nccl: ncclGroup%s failed: NCCL error %d", a->start ? "Start" : "End", (int)res);
    call->nout = 0;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_mem_alloc(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_MEM_ALLOC *a = SRV_ARGS(call, NCCL_MEM_ALLOC);
    struct srv_nccl *n;
    void *p = NULL;
    ncclResult_t res;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = s->nccl;
    if (a->size == 0 || !srv_quota_charge(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (n->nmems == n->mem_cap) {
        size_t cap = n->mem_cap ? 2 * n->mem_cap : 16;
        struct nccl_mem *m = realloc(n->mems, cap * sizeof(*m));

        if (m == NULL) {
            srv_quota_release(s, a->size);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        n->mems = m, n->mem_cap = cap;
    }
    if ((res = lib.MemAlloc(&p, (size_t)a->size)) != ncclSuccess) {
        srv_quota_release(s, a->size);
        p = NULL;
    } else
        n->mems[n->nmems++] = (struct nccl_mem){p, (size_t)a->size};
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_mem_free(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_MEM_FREE *a = SRV_ARGS(call, NCCL_MEM_FREE);
    struct srv_nccl *n;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = s->nccl;
    for (size_t i = 0; i < n->nmems; i++)
        if ((uint64_t)(uintptr_t)n->mems[i].ptr == a->dptr) {
            call->out[call->nout++] = (uint64_t)lib.MemFree(n->mems[i].ptr);
            srv_quota_release(s, n->mems[i].size);
            n->mems[i] = n->mems[--n->nmems];
            return CUDA_SUCCESS;
        }
    call->out[call->nout++] = ncclInvalidArgument; /* not this session's */
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_register(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REGISTER *a = SRV_ARGS(call, NCCL_REGISTER);
    ncclComm_t comm;
    void *handle = NULL;

    if (!ready(s, call) || (comm = comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] =
        (uint64_t)lib.CommRegister(comm, (void *)(uintptr_t)a->buf, (size_t)a->size, &handle);
    call->out[call->nout++] = (uint64_t)(uintptr_t)handle;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_deregister(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_DEREGISTER *a = SRV_ARGS(call, NCCL_DEREGISTER);
    ncclComm_t comm;

    if (!ready(s, call) || (comm = comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] = (uint64_t)lib.CommDeregister(comm, (void *)(uintptr_t)a->handle);
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_redop_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REDOP_CREATE *a = SRV_ARGS(call, NCCL_REDOP_CREATE);
    ncclComm_t comm;
    ncclRedOp_t op = ncclSum;
    uint64_t value = a->scalar;
    void *scalar =
        a->residence == ncclScalarHostImmediate ? (void *)&value : (void *)(uintptr_t)value;

    if (a->type >= ncclNumTypes || a->residence > ncclScalarHostImmediate)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call) || (comm = comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] = (uint64_t)lib.RedOpCreatePreMulSum(
        &op, scalar, (ncclDataType_t)a->type, (ncclScalarResidence_t)a->residence, comm);
    call->out[call->nout++] = (uint64_t)op;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_redop_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REDOP_DESTROY *a = SRV_ARGS(call, NCCL_REDOP_DESTROY);
    ncclComm_t comm;

    if (!ready(s, call) || (comm = comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] = (uint64_t)lib.RedOpDestroy((ncclRedOp_t)(uint32_t)a->op, comm);
    return CUDA_SUCCESS;
}

void srv_nccl_teardown(struct srv_session *s)
{
    struct srv_nccl *n = s->nccl;
    size_t ncomms, nmems, bytes = 0;

    if (n == NULL)
        return;
    pthread_mutex_lock(&n->lock);
    n->stop = true;
    pthread_mutex_unlock(&n->lock);
    if (n->watching)
        pthread_join(n->watchdog, NULL);
    ncomms = n->nrecs;
    nmems = n->nmems;
    while (n->nrecs > 0) {
        struct nccl_rec *r = &n->recs[n->nrecs - 1];

        if (r->comm != NULL && s->drv.cuCtxSetCurrent(r->ctx) == CUDA_SUCCESS)
            lib.CommAbort(r->comm);
        bytes += r->charged;
        rec_drop(s, n, r);
    }
    for (size_t i = 0; i < n->nmems; i++) {
        lib.MemFree(n->mems[i].ptr);
        bytes += n->mems[i].size;
        srv_quota_release(s, n->mems[i].size);
    }
    if (ncomms + nmems > 0)
        rg_info("nccl: session end: aborted %zu communicator(s), freed %zu NCCL allocation(s), "
                "%zu bytes of quota given back", ncomms, nmems, bytes);
    pthread_mutex_destroy(&n->lock);
    free(n->recs);
    free(n->mems);
    free(n);
    s->nccl = NULL;
}
