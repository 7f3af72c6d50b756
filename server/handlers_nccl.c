/* Communicator operations of the NCCL shim (proto/ops.def NCCL_*), run with the GPU host's NCCL
 * in the session's context: its version and features, unique ids, creation (init, scalable
 * init, split, shrink: nccl_state.c), finalize/destroy/abort/revoke, async errors and the device
 * API's team queries. Synchronous ones answer out[0] = ncclResult_t. docs/nccl.md. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/nccl_internal.h"

/* The library loaded and the session's state made; else out[0] = ncclSystemError. */
static bool ready(struct srv_session *s, struct srv_call *call)
{
    if (nccl_lib_ready(s) && nccl_state(s) != NULL)
        return true;
    call->out[call->nout++] = (uint64_t)ncclSystemError;
    return false;
}

CUresult srv_op_nccl_version(struct srv_session *s, struct srv_call *call)
{
    if (!ready(s, call))
        return CUDA_SUCCESS;
    call->out[call->nout++] = ncclSuccess;
    call->out[call->nout++] = (uint64_t)nccl_lib.version;
    call->out[call->nout++] = nccl_lib.features;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_unique_id(struct srv_session *s, struct srv_call *call)
{
    ncclUniqueId *id = srv_scratch(s, sizeof(*id)); /* the reply's data, until the next call */
    uint8_t *tail;
    ncclResult_t res;

    if (id == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!ready(s, call))
        return CUDA_SUCCESS;
    tail = (uint8_t *)id->internal + NCCL_WIRE_MAC_OFFSET;
    memset(id, 0, sizeof(*id));
    if ((res = nccl_lib.GetUniqueId(id)) == ncclSuccess) {
        for (int i = 0; i < NCCL_WIRE_MAC_LEN; i++)
            if (tail[i] != 0) {
                rg_error("nccl: %s fills the whole unique id; rgpu cannot bind it to a tenant",
                         nccl_lib_path);
                res = ncclInternalError;
                break;
            }
    }
    call->out[call->nout++] = (uint64_t)res;
    if (res == ncclSuccess) {
        nccl_id_mac(s, (const uint8_t *)id->internal, tail);
        call->rdata = id->internal;
        call->rdata_len = sizeof(id->internal);
    }
    return CUDA_SUCCESS;
}

/* The application's config words as an ncclConfig_t of NCCL 2.18's layout (the members up to
 * splitShare; NCCL reads a config only as far as its version says, so a newer library takes it
 * with the later members unset), blocking (the worker waits, or its creation thread does).
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

/* A child's identity across its ranks: its parent's, which split of the parent, and its color
 * (every rank of the parent makes its splits and shrinks in the same order). */
static void child_ident(struct srv_session *s, uint64_t parent, int color, const char *how,
                        uint8_t out[RG_SHA256_LEN])
{
    struct nccl_rec *r;
    struct rg_sha256 c;
    uint32_t seq = 0;

    rg_sha256_init(&c);
    pthread_mutex_lock(&nccl_state(s)->lock);
    if ((r = nccl_rec_find(nccl_state(s), parent)) != NULL) {
        rg_sha256_update(&c, r->ident, sizeof(r->ident));
        seq = r->splits++;
    }
    pthread_mutex_unlock(&nccl_state(s)->lock);
    rg_sha256_update(&c, how, strlen(how));
    rg_sha256_update(&c, &seq, sizeof(seq));
    rg_sha256_update(&c, &color, sizeof(color));
    rg_sha256_final(&c, out);
}

/* NCCL_COMM_INIT and NCCL_COMM_INIT_SCALABLE (one or several ids in the data). */
CUresult srv_op_nccl_comm_init(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_INIT *a = SRV_ARGS(call, NCCL_COMM_INIT);
    size_t len = call->msg->data.len, nids = len / sizeof(ncclUniqueId);
    struct nccl_make_args m = {.how = NCCL_MAKE_INIT};
    ncclUniqueId ids[NCCL_WIRE_DATA_MAX / sizeof(ncclUniqueId)];
    bool scalable = call->msg->op == PROTO_OP_NCCL_COMM_INIT_SCALABLE;

    if (len == 0 || len % sizeof(ncclUniqueId) != 0 || nids > sizeof(ids) / sizeof(ids[0]) ||
        (!scalable && nids != 1) || a->comm == 0 || a->nranks == 0 || a->nranks > INT32_MAX ||
        a->rank >= a->nranks)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call))
        return CUDA_SUCCESS;
    if (scalable && nccl_lib.CommInitRankScalable == NULL) {
        call->out[call->nout++] = (uint64_t)ncclInvalidUsage;
        return CUDA_SUCCESS;
    }
    memcpy(ids, call->msg->data.data, len);
    for (size_t i = 0; i < nids; i++)
        if (!nccl_id_check(s, &ids[i])) {
            rg_error("nccl: a unique id not made for tenant '%s' was refused (communicator "
                     "%llu)",
                     s->tenant, (unsigned long long)a->comm);
            call->out[call->nout++] = (uint64_t)ncclInvalidArgument;
            return CUDA_SUCCESS;
        }
    rg_sha256(ids, len, m.ident);
    m.nranks = (int)a->nranks;
    m.rank = (int)a->rank;
    m.nids = (int)nids;
    m.ids = ids;
    m.configp = config_of(a->config, &m.config);
    return nccl_make(s, call, a->comm, &m, a->async != 0);
}

CUresult srv_op_nccl_comm_split(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_SPLIT *a = SRV_ARGS(call, NCCL_COMM_SPLIT);
    struct nccl_make_args m = {.how = NCCL_MAKE_SPLIT};

    if (!ready(s, call) || (m.parent = nccl_comm_of(s, call, a->parent)) == NULL)
        return CUDA_SUCCESS;
    if (a->comm == 0)
        return CUDA_ERROR_INVALID_VALUE;
    m.color = (int)(uint32_t)a->color;
    m.key = (int)(uint32_t)a->key;
    m.configp = config_of(a->config, &m.config);
    child_ident(s, a->parent, m.color, "split", m.ident);
    return nccl_make(s, call, a->comm, &m, a->async != 0);
}

CUresult srv_op_nccl_comm_shrink(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_SHRINK *a = SRV_ARGS(call, NCCL_COMM_SHRINK);
    struct nccl_make_args m = {.how = NCCL_MAKE_SHRINK};
    int exclude[NCCL_WIRE_DATA_MAX / sizeof(int)];
    size_t len = call->msg->data.len;

    if (a->comm == 0 || len % sizeof(int) != 0 || len > sizeof(exclude))
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call) || (m.parent = nccl_comm_of(s, call, a->parent)) == NULL)
        return CUDA_SUCCESS;
    if (nccl_lib.CommShrink == NULL) {
        call->out[call->nout++] = (uint64_t)ncclInvalidUsage;
        return CUDA_SUCCESS;
    }
    memcpy(exclude, call->msg->data.data, len);
    m.exclude = exclude;
    m.nexclude = (int)(len / sizeof(int));
    m.flags = (int)(uint32_t)a->flags;
    m.configp = config_of(a->config, &m.config);
    child_ident(s, a->parent, 0, "shrink", m.ident);
    return nccl_make(s, call, a->comm, &m, a->async != 0);
}

/* A communicator with an async error (a peer is gone) is aborted rather than destroyed: a
 * destroy would wait for that peer, with the watchdog locked out. */
static bool comm_failed(ncclComm_t comm)
{
    ncclResult_t e = ncclSuccess;

    return nccl_lib.CommGetAsyncError(comm, &e) == ncclSuccess && e != ncclSuccess &&
           e != ncclInProgress;
}

CUresult srv_op_nccl_comm_end(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_END *a = SRV_ARGS(call, NCCL_COMM_END);
    struct srv_nccl *n;
    struct nccl_rec *r;
    ncclResult_t res = ncclInvalidArgument;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = nccl_state(s);
    if (nccl_comm_of(s, call, a->comm) == NULL) /* waits for a creation still running */
        call->nout = 0;
    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, a->comm)) != NULL) {
        if (r->comm == NULL) /* aborted by the watchdog, or never made: nothing left in NCCL */
            res = a->how == NCCL_WIRE_FINALIZE ? r->error : ncclSuccess;
        else if (a->how == NCCL_WIRE_FINALIZE)
            res = nccl_lib.CommFinalize(r->comm);
        else if (a->how == NCCL_WIRE_DESTROY && !comm_failed(r->comm))
            res = nccl_lib.CommDestroy(r->comm);
        else
            res = nccl_lib.CommAbort(r->comm);
        if (a->how != NCCL_WIRE_FINALIZE)
            nccl_rec_drop(n, r, true);
    }
    pthread_mutex_unlock(&n->lock);
    call->out[call->nout++] = (uint64_t)res;
    return CUDA_SUCCESS;
}

/* out: result, the communicator's error (ncclInProgress while its creation runs), and its
 * size and rank (a creation started with async learns them here). */
CUresult srv_op_nccl_async_error(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_ASYNC_ERROR *a = SRV_ARGS(call, NCCL_ASYNC_ERROR);
    struct nccl_rec *r;
    ncclResult_t res = ncclInvalidArgument, e = ncclSuccess;
    int nranks = 0, rank = 0;
    bool adopted = false;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&nccl_state(s)->lock);
    if ((r = nccl_rec_find(nccl_state(s), a->comm)) != NULL) {
        res = ncclSuccess;
        adopted = r->make != NULL;
        if (nccl_make_poll(s, r))
            e = ncclInProgress, adopted = false;
        else if ((e = r->error) == ncclSuccess && r->comm != NULL)
            res = nccl_lib.CommGetAsyncError(r->comm, &e);
        if (r->comm != NULL && r->nranks < 0) { /* made inside a group: known after its end */
            if (nccl_lib.CommCount(r->comm, &r->nranks) != ncclSuccess ||
                nccl_lib.CommUserRank(r->comm, &r->rank) != ncclSuccess)
                r->nranks = r->rank = -1;
        }
        nranks = r->nranks, rank = r->rank;
        adopted = adopted && r->comm != NULL;
        if (e == ncclSuccess && r->comm == NULL && r->make == NULL) /* a split without color */
            nccl_rec_drop(nccl_state(s), r, true);
    }
    pthread_mutex_unlock(&nccl_state(s)->lock);
    if (adopted)
        nccl_pairs_adopted(s, a->comm);
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)e;
    call->out[call->nout++] = (uint64_t)(uint32_t)nranks;
    call->out[call->nout++] = (uint64_t)(uint32_t)rank;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_comm_revoke(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_REVOKE *a = SRV_ARGS(call, NCCL_COMM_REVOKE);
    ncclComm_t comm;

    if (!ready(s, call) || (comm = nccl_comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] =
        (uint64_t)(nccl_lib.CommRevoke != NULL ? nccl_lib.CommRevoke(comm, (int)(uint32_t)a->flags)
                                               : ncclInvalidUsage);
    return CUDA_SUCCESS;
}

/* The device API's host-side team queries that need NCCL's view of the node. */
CUresult srv_op_nccl_comm_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_COMM_QUERY *a = SRV_ARGS(call, NCCL_COMM_QUERY);
    ncclComm_t comm;
    ncclTeam_t t = {0, 0, 0};

    if (a->what > NCCL_WIRE_RANK_TO_LSA)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call) || (comm = nccl_comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    if (!(nccl_lib.features & NCCL_FEAT_TEAMS)) {
        call->out[call->nout++] = (uint64_t)ncclInvalidUsage;
        return CUDA_SUCCESS;
    }
    if (a->what == NCCL_WIRE_TEAM_LSA)
        t = nccl_lib.TeamLsa(comm);
    else if (a->what == NCCL_WIRE_TEAM_RAIL)
        t = nccl_lib.TeamRail(comm);
    else {
        ncclTeam_t team = {(int)(uint32_t)a->a, (int)(uint32_t)a->b, (int)(uint32_t)a->c};

        t.nRanks = nccl_lib.TeamRankToLsa(comm, team, (int)(uint32_t)a->d);
    }
    call->out[call->nout++] = ncclSuccess;
    call->out[call->nout++] = (uint64_t)(uint32_t)t.nRanks;
    call->out[call->nout++] = (uint64_t)(uint32_t)t.rank;
    call->out[call->nout++] = (uint64_t)(uint32_t)t.stride;
    return CUDA_SUCCESS;
}
