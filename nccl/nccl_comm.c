/* Communicators of the NCCL shim: unique ids, init, split, finalize/destroy/abort and the
 * local queries. The worker holds the real communicator; the shim's ncclComm_t names it by id. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl/nccl_shim.h"
#include "nccl/nccl_wire.h"
#include "proto/ops.h"

static uint64_t next_comm_id = 1;

struct ncclComm *nccl_comm_check(ncclComm_t comm)
{
    return comm != NULL && comm->magic == NCCL_SHIM_COMM_MAGIC ? comm : NULL;
}

void nccl_config_words(const ncclConfig_t *config, uint64_t *w)
{
    const int undef = NCCL_CONFIG_UNDEF_INT;
    int v[NCCL_WIRE_CONFIG_WORDS] = {undef, undef, undef, undef, undef};

    if (config != NULL && config->size >= offsetof(ncclConfig_t, splitShare) + sizeof(int)) {
        v[0] = config->blocking;
        v[1] = config->cgaClusterSize;
        v[2] = config->minCTAs;
        v[3] = config->maxCTAs;
        v[4] = config->splitShare;
    }
    for (int i = 0; i < NCCL_WIRE_CONFIG_WORDS; i++)
        w[i] = (uint64_t)(uint32_t)v[i];
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_UNIQUE_ID, .stream_arg = ~0u};
    ncclResult_t res;

    if (id == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
    c.rdata = id->internal;
    c.rdata_cap = sizeof(id->internal);
    if ((res = nccl_call_sync(&c, NULL, "ncclGetUniqueId")) != ncclSuccess)
        return res;
    if (c.rdata_len != sizeof(id->internal))
        return nccl_fail(ncclInternalError, "ncclGetUniqueId: the worker sent %llu bytes",
                         (unsigned long long)c.rdata_len);
    return ncclSuccess;
}

static struct ncclComm *comm_new(int nranks, int rank, const ncclConfig_t *config)
{
    const struct nccl_client *cl = nccl_client();
    struct ncclComm *comm;
    CUdevice dev = 0;
    CUresult cur;

    /* NCCL asks the runtime (cudaGetDevice): a thread that never chose a device has device 0
     * there but no current context here (CuPy's thread for device 0 makes its communicator so);
     * the calls are routed to the communicator's device (nccl_client.c). */
    if (cl == NULL ||
        ((cur = cl->cuCtxGetDevice(&dev)) != CUDA_SUCCESS && cur != CUDA_ERROR_INVALID_CONTEXT) ||
        (comm = calloc(1, sizeof(*comm))) == NULL)
        return NULL;
    comm->id = __atomic_fetch_add(&next_comm_id, 1, __ATOMIC_RELAXED);
    comm->nranks = nranks;
    comm->rank = rank;
    comm->dev = (int)dev;
    /* Blocking unless the application's config says 0 (NCCL_CONFIG_UNDEF_INT: NCCL's
     * default, blocking). */
    comm->blocking = !(config != NULL && config->size >= offsetof(ncclConfig_t, cgaClusterSize) &&
                       config->blocking == 0);
    return comm;
}

/* Ask the worker how comm's creation stands: ncclInProgress while it runs, else its result
 * (nranks and rank then filled). */
static ncclResult_t creation_state(struct ncclComm *comm, const char *what)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_ASYNC_ERROR, .nargs = 1, .stream_arg = ~0u};
    ncclResult_t res;

    c.args[0] = comm->id;
    if ((res = nccl_call_sync(&c, comm, what)) != ncclSuccess)
        return res;
    if (c.nout >= 4 && (int)c.out[2] >= 0 && c.out[1] != ncclInProgress)
        comm->nranks = (int)c.out[2], comm->rank = (int)c.out[3];
    return c.nout >= 2 ? (ncclResult_t)c.out[1] : ncclInternalError;
}

void nccl_comm_refresh(struct ncclComm *comm)
{
    if (comm->nranks < 0)
        creation_state(comm, "ncclCommCount");
}

/* A creation the worker started on its own thread (its answer: ncclInProgress). A blocking
 * communicator waits here, asking the worker between short sleeps (each ask is a short call of
 * the session, so other threads' calls, such as the other ranks' creations of a process that
 * drives several devices, go through meanwhile); a non-blocking one answers ncclInProgress and
 * the application polls ncclCommGetAsyncError, as with NCCL. */
static ncclResult_t creation_wait(struct ncclComm *comm, const char *what)
{
    useconds_t nap = 50;
    ncclResult_t res;

    if (!comm->blocking)
        return ncclInProgress;
    while ((res = creation_state(comm, what)) == ncclInProgress) {
        usleep(nap);
        nap = nap < 2000 ? nap * 2 : 2000;
    }
    return res == ncclSuccess
               ? res
               : nccl_fail(res, "%s failed on the GPU host (NCCL error %d)", what, (int)res);
}

/* The end of a creation call: comm adopted (live) or dropped, on the worker too. */
static ncclResult_t creation_end(struct ncclComm *comm, ncclResult_t res, ncclComm_t *out)
{
    if (res == ncclSuccess || res == ncclInProgress) {
        comm->magic = NCCL_SHIM_COMM_MAGIC;
        *out = comm;
        return res;
    }
    if (comm->magic != 0) { /* the worker has a record: drop it */
        struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_END, .nargs = 2, .stream_arg = ~0u};

        c.args[0] = comm->id;
        c.args[1] = NCCL_WIRE_ABORT;
        nccl_call_sync(&c, comm, "ncclCommAbort");
    }
    free(comm);
    return res;
}

/* Send a creation (its args set, args[async_arg] the async word), then wait as the
 * communicator's config says. The worker's answer: result (ncclInProgress when it started it on
 * its own thread), nranks, rank. */
static ncclResult_t create(struct rgpu_nccl_call *c, unsigned async_arg, struct ncclComm *comm,
                           ncclComm_t *out, const char *what)
{
    ncclResult_t res;

    c->args[async_arg] = 1;
    c->nargs = async_arg + 1;
    res = nccl_call_sync(c, comm, what);
    if (res == ncclSuccess && c->nout >= 3) /* -1: made in a group, known at its end */
        comm->nranks = (int)c->out[1], comm->rank = (int)c->out[2];
    if (res == ncclInProgress) {
        comm->magic = NCCL_SHIM_COMM_MAGIC; /* the worker holds its record */
        res = creation_wait(comm, what);
    }
    return creation_end(comm, res, out);
}

static ncclResult_t init_check(ncclComm_t *comm_p, int nranks, int rank, const ncclConfig_t *config,
                               const char *what)
{
    if (comm_p == NULL)
        return nccl_fail(ncclInvalidArgument, "%s: comm is NULL", what);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nccl_fail(ncclInvalidArgument, "%s: rank %d of %d", what, rank, nranks);
    if (config != NULL && config->magic != NCCL_CONFIG_MAGIC)
        return nccl_fail(ncclInvalidArgument, "%s: config not initialized", what);
    return ncclSuccess;
}

static ncclResult_t init_ids(ncclComm_t *comm_p, int nranks, int rank, int nids,
                             const ncclUniqueId *ids, ncclConfig_t *config, const char *what)
{
    struct rgpu_nccl_call c = {.op = nids == 1 ? PROTO_OP_NCCL_COMM_INIT
                                               : PROTO_OP_NCCL_COMM_INIT_SCALABLE,
                               .stream_arg = ~0u,
                               .data = ids,
                               .data_len = (uint64_t)nids * sizeof(*ids)};
    struct ncclComm *comm;
    ncclResult_t res;

    if ((res = init_check(comm_p, nranks, rank, config, what)) != ncclSuccess)
        return res;
    if ((comm = comm_new(nranks, rank, config)) == NULL)
        return nccl_fail(ncclUnhandledCudaError, "%s: no current CUDA context", what);
    c.args[0] = comm->id;
    c.args[1] = (uint64_t)nranks;
    c.args[2] = (uint64_t)rank;
    nccl_config_words(config, &c.args[3]);
    return create(&c, 3 + NCCL_WIRE_CONFIG_WORDS, comm, comm_p, what);
}

NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm_p, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t *config)
{
    return init_ids(comm_p, nranks, rank, 1, &id, config, "ncclCommInitRank");
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

/* The ids travel inline: at most 32 of them. */
NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm_p, int nranks, int rank,
                                                  int nids, ncclUniqueId *ids, ncclConfig_t *config)
{
    ncclResult_t res;

    if (nids < 1 || nids > (int)(NCCL_WIRE_DATA_MAX / sizeof(ncclUniqueId)) || ids == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRankScalable: %d ids", nids);
    if (nids > 1 &&
        (res = nccl_need(NCCL_FEAT_SCALABLE, "ncclCommInitRankScalable")) != ncclSuccess)
        return res;
    return init_ids(comm_p, nranks, rank, nids, ids, config, "ncclCommInitRankScalable");
}

/* One communicator over ndev devices of this process: one id, each rank initialized in its
 * device's primary context inside one group (as NCCL documents for a single thread): the
 * worker runs them together at the group's end. */
NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    const struct nccl_client *cl = nccl_client();
    ncclResult_t res, end;
    ncclUniqueId id;
    CUcontext saved = NULL, ctx;
    CUdevice dev;

    if (comms == NULL || ndev < 1)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitAll: %d devices", ndev);
    if (cl == NULL)
        return nccl_fail(ncclSystemError, "ncclCommInitAll: no rgpu session");
    if ((res = ncclGetUniqueId(&id)) != ncclSuccess)
        return res;
    cl->cuCtxGetCurrent(&saved);
    if ((res = ncclGroupStart()) != ncclSuccess)
        return res;
    for (int i = 0; i < ndev && res == ncclSuccess; i++) {
        if (cl->cuDeviceGet(&dev, devlist != NULL ? devlist[i] : i) != CUDA_SUCCESS ||
            cl->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cl->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
            res = nccl_fail(ncclInvalidArgument, "ncclCommInitAll: device %d",
                            devlist != NULL ? devlist[i] : i);
        else
            res = ncclCommInitRank(&comms[i], ndev, id, i);
    }
    end = ncclGroupEnd();
    cl->cuCtxSetCurrent(saved);
    return res != ncclSuccess ? res : end;
}

NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_SPLIT, .stream_arg = ~0u};
    struct ncclComm *parent = nccl_comm_check(comm), *child;
    ncclResult_t res;

    if (parent == NULL || newcomm == NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
        return nccl_fail(ncclInvalidArgument, "ncclCommSplit: bad communicator or color");
    if (config != NULL && config->magic != NCCL_CONFIG_MAGIC)
        return nccl_fail(ncclInvalidArgument, "ncclCommSplit: config not initialized");
    *newcomm = NULL;
    /* NULL config: the child inherits the parent's (blocking among them). */
    if ((child = comm_new(-1, -1, config)) == NULL)
        return nccl_fail(ncclUnhandledCudaError, "ncclCommSplit: no current CUDA context");
    if (config == NULL)
        child->blocking = parent->blocking;
    c.args[0] = parent->id;
    c.args[1] = child->id;
    c.args[2] = (uint64_t)(uint32_t)color;
    c.args[3] = (uint64_t)(uint32_t)key;
    nccl_config_words(config, &c.args[4]);
    res = create(&c, 4 + NCCL_WIRE_CONFIG_WORDS, child, newcomm, "ncclCommSplit");
    if (res == ncclSuccess && child->nranks == 0) { /* NCCL_SPLIT_NOCOLOR: no communicator */
        child->magic = 0;
        free(child);
        *newcomm = NULL;
    }
    return res;
}

NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int nexclude,
                                        ncclComm_t *newcomm, ncclConfig_t *config, int flags)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_SHRINK,
                               .stream_arg = ~0u,
                               .data = exclude,
                               .data_len = (uint64_t)nexclude * sizeof(int)};
    struct ncclComm *parent = nccl_comm_check(comm), *child;
    ncclResult_t res;

    if (parent == NULL || newcomm == NULL || nexclude < 0 || (nexclude > 0 && exclude == NULL) ||
        (size_t)nexclude * sizeof(int) > NCCL_WIRE_DATA_MAX)
        return nccl_fail(ncclInvalidArgument, "ncclCommShrink: bad argument");
    if (config != NULL && config->magic != NCCL_CONFIG_MAGIC)
        return nccl_fail(ncclInvalidArgument, "ncclCommShrink: config not initialized");
    if ((res = nccl_need(NCCL_FEAT_SHRINK, "ncclCommShrink")) != ncclSuccess)
        return res;
    *newcomm = NULL;
    if ((child = comm_new(-1, -1, config)) == NULL)
        return nccl_fail(ncclUnhandledCudaError, "ncclCommShrink: no current CUDA context");
    if (config == NULL)
        child->blocking = parent->blocking;
    c.args[0] = parent->id;
    c.args[1] = child->id;
    c.args[2] = (uint64_t)(uint32_t)flags;
    nccl_config_words(config, &c.args[3]);
    return create(&c, 3 + NCCL_WIRE_CONFIG_WORDS, child, newcomm, "ncclCommShrink");
}

NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_REVOKE, .nargs = 2, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommRevoke: bad communicator");
    if ((res = nccl_need(NCCL_FEAT_REVOKE, "ncclCommRevoke")) != ncclSuccess)
        return res;
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)(uint32_t)flags;
    return nccl_call_sync(&c, cm, "ncclCommRevoke");
}

static ncclResult_t comm_end(ncclComm_t comm, enum nccl_wire_end how, const char *what)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_END, .nargs = 2, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL)
        return how == NCCL_WIRE_FINALIZE ? nccl_fail(ncclInvalidArgument, "%s: bad comm", what)
                                         : ncclSuccess; /* NCCL: NULL is a no-op */
    c.args[0] = cm->id;
    c.args[1] = how;
    res = nccl_call_sync(&c, cm, what);
    if (how != NCCL_WIRE_FINALIZE) { /* the worker dropped it whatever the result */
        cm->magic = 0;
        free(cm);
    }
    return res;
}

NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm_end(comm, NCCL_WIRE_FINALIZE, "ncclCommFinalize");
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm_end(comm, NCCL_WIRE_DESTROY, "ncclCommDestroy");
}

NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm_end(comm, NCCL_WIRE_ABORT, "ncclCommAbort");
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_ASYNC_ERROR, .nargs = 1, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL || async_error == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: bad argument");
    c.args[0] = cm->id;
    if ((res = nccl_call_sync(&c, cm, "ncclCommGetAsyncError")) != ncclSuccess)
        return res;
    *async_error = c.nout >= 2 ? (ncclResult_t)c.out[1] : ncclInternalError;
    if (c.nout >= 4 && (int)c.out[2] > 0 && *async_error != ncclInProgress)
        cm->nranks = (int)c.out[2], cm->rank = (int)c.out[3];
    return ncclSuccess;
}

enum comm_field { FIELD_COUNT, FIELD_DEVICE, FIELD_RANK };

static ncclResult_t comm_int(ncclComm_t comm, int *out, enum comm_field f, const char *what)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL || out == NULL)
        return nccl_fail(ncclInvalidArgument, "%s: bad argument", what);
    if (f != FIELD_DEVICE)
        nccl_comm_refresh(cm);
    *out = f == FIELD_COUNT ? cm->nranks : f == FIELD_RANK ? cm->rank : cm->dev;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return comm_int(comm, count, FIELD_COUNT, "ncclCommCount");
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return comm_int(comm, device, FIELD_DEVICE, "ncclCommCuDevice");
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return comm_int(comm, rank, FIELD_RANK, "ncclCommUserRank");
}

/* ---- the device API's host side: teams (nccl_device.h) ----------------------------------
 * World and rank-to-world are arithmetic on the communicator; the LSA team (the ranks that
 * reach each other's memory) and the rail team are NCCL's view of the node, asked of the
 * worker. As with NCCL, a failure answers an empty team (or -1). */
static ncclTeam_t team_query(ncclComm_t comm, int what, ncclTeam_t team, int rank)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_QUERY, .nargs = 6, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclTeam_t t = {0, 0, 0};

    if (cm == NULL || nccl_need(NCCL_FEAT_TEAMS, "ncclTeamLsa") != ncclSuccess)
        return t;
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)what;
    c.args[2] = (uint64_t)(uint32_t)team.nRanks;
    c.args[3] = (uint64_t)(uint32_t)team.rank;
    c.args[4] = (uint64_t)(uint32_t)team.stride;
    c.args[5] = (uint64_t)(uint32_t)rank;
    if (nccl_call_sync(&c, cm, "ncclTeam") == ncclSuccess && c.nout >= 4)
        t = (ncclTeam_t){(int)c.out[1], (int)c.out[2], (int)c.out[3]};
    return t;
}

NCCL_EXPORT ncclTeam_t ncclTeamWorld(ncclComm_t comm)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL)
        return (ncclTeam_t){0, 0, 0};
    nccl_comm_refresh(cm);
    return (ncclTeam_t){cm->nranks, cm->rank, 1};
}

NCCL_EXPORT ncclTeam_t ncclTeamLsa(ncclComm_t comm)
{
    return team_query(comm, NCCL_WIRE_TEAM_LSA, (ncclTeam_t){0, 0, 0}, 0);
}

NCCL_EXPORT ncclTeam_t ncclTeamRail(ncclComm_t comm)
{
    return team_query(comm, NCCL_WIRE_TEAM_RAIL, (ncclTeam_t){0, 0, 0}, 0);
}

NCCL_EXPORT int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL)
        return -1;
    nccl_comm_refresh(cm);
    return cm->rank + (rank - team.rank) * team.stride;
}

NCCL_EXPORT int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL || nccl_features() == 0)
        return -1;
    return team_query(comm, NCCL_WIRE_RANK_TO_LSA, team, rank).nRanks;
}

NCCL_PROFILE_ALIAS(ncclGetUniqueId)
NCCL_PROFILE_ALIAS(ncclCommInitRankConfig)
NCCL_PROFILE_ALIAS(ncclCommInitRank)
NCCL_PROFILE_ALIAS(ncclCommInitAll)
NCCL_PROFILE_ALIAS(ncclCommSplit)
NCCL_PROFILE_ALIAS(ncclCommFinalize)
NCCL_PROFILE_ALIAS(ncclCommDestroy)
NCCL_PROFILE_ALIAS(ncclCommAbort)
NCCL_PROFILE_ALIAS(ncclCommGetAsyncError)
NCCL_PROFILE_ALIAS(ncclCommCount)
NCCL_PROFILE_ALIAS(ncclCommCuDevice)
NCCL_PROFILE_ALIAS(ncclCommUserRank)
NCCL_PROFILE_ALIAS(ncclCommInitRankScalable)
NCCL_PROFILE_ALIAS(ncclCommShrink)
NCCL_PROFILE_ALIAS(ncclCommRevoke)
NCCL_PROFILE_ALIAS(ncclTeamWorld)
NCCL_PROFILE_ALIAS(ncclTeamLsa)
NCCL_PROFILE_ALIAS(ncclTeamRail)
NCCL_PROFILE_ALIAS(ncclTeamRankToWorld)
NCCL_PROFILE_ALIAS(ncclTeamRankToLsa)
