/* Communicators of the NCCL shim: unique ids, init, split, finalize/destroy/abort and the
 * local queries. The worker holds the real communicator; the shim's ncclComm_t names it by id. */
#include <stdlib.h>
#include <string.h>

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
    if ((res = nccl_call_sync(&c, "ncclGetUniqueId")) != ncclSuccess)
        return res;
    if (c.rdata_len != sizeof(id->internal))
        return nccl_fail(ncclInternalError, "ncclGetUniqueId: the worker sent %llu bytes",
                         (unsigned long long)c.rdata_len);
    return ncclSuccess;
}

static struct ncclComm *comm_new(int nranks, int rank)
{
    const struct nccl_client *cl = nccl_client();
    struct ncclComm *comm;
    CUdevice dev;

    if (cl == NULL || cl->cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        (comm = calloc(1, sizeof(*comm))) == NULL)
        return NULL;
    comm->id = __atomic_fetch_add(&next_comm_id, 1, __ATOMIC_RELAXED);
    comm->nranks = nranks;
    comm->rank = rank;
    comm->dev = (int)dev;
    return comm;
}

NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm_p, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t *config)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_INIT, .nargs = 3 + NCCL_WIRE_CONFIG_WORDS,
                               .stream_arg = ~0u, .data = id.internal,
                               .data_len = sizeof(id.internal)};
    struct ncclComm *comm;
    ncclResult_t res;

    if (comm_p == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    if (config != NULL && config->magic != NCCL_CONFIG_MAGIC)
        return nccl_fail(ncclInvalidArgument, "ncclCommInitRankConfig: config not initialized");
    if ((comm = comm_new(nranks, rank)) == NULL)
        return nccl_fail(ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA context");
    c.args[0] = comm->id;
    c.args[1] = (uint64_t)nranks;
    c.args[2] = (uint64_t)rank;
    nccl_config_words(config, &c.args[3]);
    if ((res = nccl_call_sync(&c, "ncclCommInitRank")) != ncclSuccess) {
        free(comm);
        return res;
    }
    comm->magic = NCCL_SHIM_COMM_MAGIC;
    *comm_p = comm;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

/* One communicator over ndev devices of this process: one id, each rank initialized in its
 * device's primary context inside one group (as NCCL documents for a single thread). */
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
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_COMM_SPLIT, .nargs = 4 + NCCL_WIRE_CONFIG_WORDS,
                               .stream_arg = ~0u};
    struct ncclComm *parent = nccl_comm_check(comm), *child;
    ncclResult_t res;

    if (parent == NULL || newcomm == NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
        return nccl_fail(ncclInvalidArgument, "ncclCommSplit: bad communicator or color");
    if ((child = comm_new(0, 0)) == NULL)
        return nccl_fail(ncclUnhandledCudaError, "ncclCommSplit: no current CUDA context");
    c.args[0] = parent->id;
    c.args[1] = child->id;
    c.args[2] = (uint64_t)(uint32_t)color;
    c.args[3] = (uint64_t)(uint32_t)key;
    nccl_config_words(config, &c.args[4]);
    if ((res = nccl_call_sync(&c, "ncclCommSplit")) != ncclSuccess || c.nout < 3 ||
        c.out[1] == 0) {
        free(child);
        *newcomm = NULL;
        return res != ncclSuccess || c.nout >= 3
                   ? res
                   : nccl_fail(ncclInternalError, "ncclCommSplit: short reply");
    }
    child->nranks = (int)c.out[1];
    child->rank = (int)c.out[2];
    child->magic = NCCL_SHIM_COMM_MAGIC;
    *newcomm = child;
    return ncclSuccess;
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
    res = nccl_call_sync(&c, what);
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
    if ((res = nccl_call_sync(&c, "ncclCommGetAsyncError")) != ncclSuccess)
        return res;
    *async_error = c.nout >= 2 ? (ncclResult_t)c.out[1] : ncclInternalError;
    return ncclSuccess;
}

static ncclResult_t comm_int(ncclComm_t comm, int *out, int value, const char *what)
{
    if (nccl_comm_check(comm) == NULL || out == NULL)
        return nccl_fail(ncclInvalidArgument, "%s: bad argument", what);
    *out = value;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return comm_int(comm, count, comm != NULL ? comm->nranks : 0, "ncclCommCount");
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return comm_int(comm, device, comm != NULL ? comm->dev : 0, "ncclCommCuDevice");
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return comm_int(comm, rank, comm != NULL ? comm->rank : 0, "ncclCommUserRank");
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
