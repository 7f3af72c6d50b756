/* Collectives, point-to-point, groups, NCCL memory, buffer registration and PreMulSum ops of
 * the NCCL shim. Collectives and groups are asynchronous: their arguments are checked here and
 * they go NOREPLY in the session's stream; the worker's failures become the communicator's
 * async error (ncclCommGetAsyncError) or the next synchronous call's error. */
#include <string.h>

#include "nccl/nccl_shim.h"
#include "nccl/nccl_wire.h"

static const char *const coll_names[NCCL_WIRE_COLL_COUNT] = {
    "ncclAllReduce", "ncclBroadcast", "ncclReduce",   "ncclAllGather", "ncclReduceScatter",
    "ncclSend",      "ncclRecv",      "ncclAlltoAll", "ncclGather",    "ncclScatter",
};
/* What the worker's NCCL must offer for the kinds NCCL 2.28 added. */
static const uint64_t coll_features[NCCL_WIRE_COLL_COUNT] = {
    [NCCL_WIRE_ALLTOALL] = NCCL_FEAT_ALLTOALL,
    [NCCL_WIRE_GATHER] = NCCL_FEAT_GATHER,
    [NCCL_WIRE_SCATTER] = NCCL_FEAT_SCATTER,
};

#define NO_ARG (-2147483647 - 1) /* the call takes no reduction op / no root or peer */

/* Checks what NCCL checks before it enqueues, then sends. A reduction op is a built-in or one
 * that ncclRedOpCreatePreMulSum made (the worker checks which); a root or peer is a rank. */
static ncclResult_t coll(enum nccl_wire_coll kind, const void *sendbuf, void *recvbuf, size_t count,
                         ncclDataType_t type, int op, int root, ncclComm_t comm,
                         nccl_stream_t stream)
{
    struct rgpu_nccl_call c = {.op = kind < NCCL_WIRE_COLL_V1_COUNT ? PROTO_OP_NCCL_COLL
                                                                    : PROTO_OP_NCCL_COLL_EXT,
                               .nargs = 9,
                               .stream_arg = 8};
    const char *name = coll_names[kind];
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL)
        return nccl_fail(ncclInvalidArgument, "%s: comm is not a live communicator", name);
    if (nccl_type_size(type) == 0)
        return nccl_fail(ncclInvalidArgument, "%s: datatype %d", name, (int)type);
    if (op != NO_ARG && op < 0)
        return nccl_fail(ncclInvalidArgument, "%s: reduction op %d", name, op);
    if (root != NO_ARG && (root < 0 || root >= cm->nranks))
        return nccl_fail(ncclInvalidArgument, "%s: rank %d of %d", name, root, cm->nranks);
    if (count > 0 && ((kind != NCCL_WIRE_RECV && sendbuf == NULL) ||
                      (kind != NCCL_WIRE_SEND && recvbuf == NULL)))
        return nccl_fail(ncclInvalidArgument, "%s: NULL buffer", name);
    if (coll_features[kind] != 0 && (res = nccl_need(coll_features[kind], name)) != ncclSuccess)
        return res;
    c.args[0] = kind;
    c.args[1] = cm->id;
    c.args[2] = (uint64_t)(uintptr_t)sendbuf;
    c.args[3] = (uint64_t)(uintptr_t)recvbuf;
    c.args[4] = count;
    c.args[5] = (uint64_t)type;
    c.args[6] = (uint64_t)(uint32_t)op;
    c.args[7] = (uint64_t)(uint32_t)root;
    c.args[8] = (uint64_t)(uintptr_t)stream;
    return nccl_call_async(&c, cm, name);
}

NCCL_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       nccl_stream_t stream)
{
    return coll(NCCL_WIRE_ALL_REDUCE, sendbuff, recvbuff, count, datatype, (int)op, NO_ARG, comm,
                stream);
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       nccl_stream_t stream)
{
    if (root < 0) /* NO_ARG is negative too */
        return nccl_fail(ncclInvalidArgument, "ncclBroadcast: root %d", root);
    return coll(NCCL_WIRE_BROADCAST, sendbuff, recvbuff, count, datatype, NO_ARG, root, comm,
                stream);
}

NCCL_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, nccl_stream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, nccl_stream_t stream)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (root < 0) /* NO_ARG is negative too */
        return nccl_fail(ncclInvalidArgument, "ncclReduce: root %d", root);
    /* Only the root's receive buffer is written; the others may pass NULL. */
    if (cm != NULL && cm->rank != root && recvbuff == NULL)
        recvbuff = (void *)sendbuff;
    return coll(NCCL_WIRE_REDUCE, sendbuff, recvbuff, count, datatype, (int)op, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       nccl_stream_t stream)
{
    return coll(NCCL_WIRE_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, NO_ARG, NO_ARG, comm,
                stream);
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           nccl_stream_t stream)
{
    return coll(NCCL_WIRE_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, (int)op, NO_ARG,
                comm, stream);
}

NCCL_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, nccl_stream_t stream)
{
    if (peer < 0) /* NO_ARG is negative too */
        return nccl_fail(ncclInvalidArgument, "ncclSend: peer %d", peer);
    return coll(NCCL_WIRE_SEND, sendbuff, NULL, count, datatype, NO_ARG, peer, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, nccl_stream_t stream)
{
    if (peer < 0) /* NO_ARG is negative too */
        return nccl_fail(ncclInvalidArgument, "ncclRecv: peer %d", peer);
    return coll(NCCL_WIRE_RECV, NULL, recvbuff, count, datatype, NO_ARG, peer, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      nccl_stream_t stream)
{
    return coll(NCCL_WIRE_ALLTOALL, sendbuff, recvbuff, count, datatype, NO_ARG, NO_ARG, comm,
                stream);
}

NCCL_EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    nccl_stream_t stream)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (root < 0) /* NO_ARG is negative too */
        return nccl_fail(ncclInvalidArgument, "ncclGather: root %d", root);
    /* Only the root's receive buffer is used; the others may pass NULL. */
    if (cm != NULL && cm->rank != root && recvbuff == NULL)
        recvbuff = (void *)sendbuff;
    return coll(NCCL_WIRE_GATHER, sendbuff, recvbuff, count, datatype, NO_ARG, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     nccl_stream_t stream)
{
    struct ncclComm *cm = nccl_comm_check(comm);

    if (root < 0)
        return nccl_fail(ncclInvalidArgument, "ncclScatter: root %d", root);
    /* Only the root's send buffer is used; the others may pass NULL. */
    if (cm != NULL && cm->rank != root && sendbuff == NULL)
        sendbuff = recvbuff;
    return coll(NCCL_WIRE_SCATTER, sendbuff, recvbuff, count, datatype, NO_ARG, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclGroupStart(void)
{
    nccl_group_start();
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGroupEnd(void)
{
    uint64_t unused = 0;

    if (nccl_group_depth() == 0)
        return nccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    return nccl_group_end(PROTO_OP_NCCL_GROUP, &unused, "ncclGroupEnd");
}

/* Ends the group as ncclGroupEnd would, without launching it, and answers NCCL's estimate of
 * its time (a synchronous call: the estimate comes back). */
NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info)
{
    uint64_t est = UINT64_MAX;
    ncclSimInfo_t mine;
    size_t len;
    ncclResult_t res;
    uint32_t bits;

    if (info != NULL) {
        memcpy(&len, &info->size, sizeof(len));
        memset(&mine, 0, sizeof(mine));
        memcpy(&mine, info, len < sizeof(mine) ? len : sizeof(mine));
        if (mine.magic != NCCL_SIM_INFO_MAGIC)
            return nccl_fail(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo not initialized "
                                                  "with NCCL_SIM_INFO_INITIALIZER");
    }
    if (nccl_group_depth() == 0)
        return nccl_fail(ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
    if ((res = nccl_need(NCCL_FEAT_SIMULATE, "ncclGroupSimulateEnd")) != ncclSuccess)
        return res;
    res = nccl_group_end(PROTO_OP_NCCL_GROUP_SIMULATE, &est, "ncclGroupSimulateEnd");
    if (res != ncclSuccess)
        return res;
    if (info != NULL && est != UINT64_MAX) { /* an inner level has no estimate */
        bits = (uint32_t)est;
        memcpy(&mine.estimatedTime, &bits, sizeof(bits));
        memcpy(info, &mine, len < sizeof(mine) ? len : sizeof(mine));
    }
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_MEM_ALLOC, .nargs = 1, .stream_arg = ~0u};
    ncclResult_t res;

    if (ptr == NULL || size == 0)
        return nccl_fail(ncclInvalidArgument, "ncclMemAlloc: bad argument");
    c.args[0] = size;
    if ((res = nccl_call_sync(&c, NULL, "ncclMemAlloc")) != ncclSuccess)
        return res;
    if (c.nout < 2)
        return nccl_fail(ncclInternalError, "ncclMemAlloc: short reply");
    *ptr = (void *)(uintptr_t)c.out[1];
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_MEM_FREE, .nargs = 1, .stream_arg = ~0u};

    if (ptr == NULL)
        return ncclSuccess;
    c.args[0] = (uint64_t)(uintptr_t)ptr;
    return nccl_call_sync(&c, NULL, "ncclMemFree");
}

NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_REGISTER, .nargs = 3, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL || buff == NULL || handle == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommRegister: bad argument");
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)(uintptr_t)buff;
    c.args[2] = size;
    if ((res = nccl_call_sync(&c, cm, "ncclCommRegister")) != ncclSuccess)
        return res;
    *handle = (void *)(uintptr_t)(c.nout >= 2 ? c.out[1] : 0);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_DEREGISTER, .nargs = 2, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommDeregister: bad communicator");
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)(uintptr_t)handle;
    return nccl_call_sync(&c, cm, "ncclCommDeregister");
}

NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                ncclWindow_t *win, int flags)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_WINDOW_REGISTER, .nargs = 4, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL || win == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommWindowRegister: bad argument");
    if ((res = nccl_need(NCCL_FEAT_WINDOW, "ncclCommWindowRegister")) != ncclSuccess)
        return res;
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)(uintptr_t)buff;
    c.args[2] = size;
    c.args[3] = (uint64_t)(uint32_t)flags;
    if ((res = nccl_call_sync(&c, cm, "ncclCommWindowRegister")) != ncclSuccess)
        return res;
    /* The worker's handle, as NCCL gave it: a kernel of the device API takes it as it is. */
    *win = (ncclWindow_t)(uintptr_t)(c.nout >= 2 ? c.out[1] : 0);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    struct rgpu_nccl_call c = {
        .op = PROTO_OP_NCCL_WINDOW_DEREGISTER, .nargs = 2, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    ncclResult_t res;

    if (cm == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclCommWindowDeregister: bad communicator");
    if ((res = nccl_need(NCCL_FEAT_WINDOW, "ncclCommWindowDeregister")) != ncclSuccess)
        return res;
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)(uintptr_t)win;
    return nccl_call_sync(&c, cm, "ncclCommWindowDeregister");
}

/* The device API's resource requirements: host arithmetic that NCCL 2.28 documents by its
 * device headers (sizes of the buffers a device communicator is asked to hold). */
#define GIN_MAX_CONTEXTS 4 /* NCCL_GIN_MAX_CONTEXTS */

NCCL_EXPORT int ncclLLA2ACalcSlots(int maxElts, int maxEltSize)
{
    return maxElts * ((maxEltSize + 7) / 8);
}

NCCL_EXPORT ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots,
                                                    ncclLLA2AHandle_t *outHandle,
                                                    ncclDevResourceRequirements_t *outReq)
{
    if (outHandle == NULL || outReq == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclLLA2ACreateRequirement: NULL argument");
    outHandle->nSlots = (unsigned)nSlots;
    memset(outReq, 0, sizeof(*outReq));
    outReq->bufferSize = (size_t)nBlocks * (1 + 2 * (size_t)nSlots) * 16;
    outReq->bufferAlign = 16;
    outReq->outBufferHandle = &outHandle->bufHandle;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                         ncclLsaBarrierHandle_t *outHandle,
                                                         ncclDevResourceRequirements_t *outReq)
{
    if (outHandle == NULL || outReq == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclLsaBarrierCreateRequirement: NULL argument");
    memset(outReq, 0, sizeof(*outReq));
    outHandle->nBarriers = nBarriers;
    outReq->bufferSize =
        (3 * (size_t)nBarriers + (size_t)nBarriers * (size_t)team.nRanks) * sizeof(uint32_t);
    outReq->bufferAlign = sizeof(uint32_t);
    outReq->outBufferHandle = &outHandle->bufHandle;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team,
                                                         int nBarriers,
                                                         ncclGinBarrierHandle_t *outHandle,
                                                         ncclDevResourceRequirements_t *outReq)
{
    (void)comm;
    (void)team;
    if (outHandle == NULL || outReq == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclGinBarrierCreateRequirement: NULL argument");
    memset(outReq, 0, sizeof(*outReq));
    outReq->bufferSize = (size_t)nBarriers * GIN_MAX_CONTEXTS * sizeof(uint32_t);
    outReq->bufferAlign = sizeof(uint32_t);
    outReq->outBufferHandle = &outHandle->bufHandle;
    outReq->ginSignalCount = nBarriers;
    outReq->outGinSignalStart = &outHandle->signal0;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence, ncclComm_t comm)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_REDOP_CREATE, .nargs = 4, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);
    size_t n = nccl_type_size(datatype);
    ncclResult_t res;
    uint64_t value = 0;

    if (cm == NULL || op == NULL || scalar == NULL || n == 0 ||
        (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
        return nccl_fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: bad argument");
    if (residence == ncclScalarHostImmediate)
        memcpy(&value, scalar, n); /* the value travels; NCCL copies it at this call too */
    else
        value = (uint64_t)(uintptr_t)scalar;
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)datatype;
    c.args[2] = (uint64_t)residence;
    c.args[3] = value;
    if ((res = nccl_call_sync(&c, cm, "ncclRedOpCreatePreMulSum")) != ncclSuccess)
        return res;
    *op = (ncclRedOp_t)(c.nout >= 2 ? c.out[1] : ncclSum);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_REDOP_DESTROY, .nargs = 2, .stream_arg = ~0u};
    struct ncclComm *cm = nccl_comm_check(comm);

    if (cm == NULL || (int)op < ncclNumOps)
        return nccl_fail(ncclInvalidArgument, "ncclRedOpDestroy: bad argument");
    c.args[0] = cm->id;
    c.args[1] = (uint64_t)op;
    return nccl_call_sync(&c, cm, "ncclRedOpDestroy");
}

NCCL_PROFILE_ALIAS(ncclAllReduce)
NCCL_PROFILE_ALIAS(ncclBroadcast)
NCCL_PROFILE_ALIAS(ncclBcast)
NCCL_PROFILE_ALIAS(ncclReduce)
NCCL_PROFILE_ALIAS(ncclAllGather)
NCCL_PROFILE_ALIAS(ncclReduceScatter)
NCCL_PROFILE_ALIAS(ncclSend)
NCCL_PROFILE_ALIAS(ncclRecv)
NCCL_PROFILE_ALIAS(ncclGroupStart)
NCCL_PROFILE_ALIAS(ncclGroupEnd)
NCCL_PROFILE_ALIAS(ncclMemAlloc)
NCCL_PROFILE_ALIAS(ncclMemFree)
NCCL_PROFILE_ALIAS(ncclCommRegister)
NCCL_PROFILE_ALIAS(ncclCommDeregister)
NCCL_PROFILE_ALIAS(ncclRedOpCreatePreMulSum)
NCCL_PROFILE_ALIAS(ncclRedOpDestroy)
NCCL_PROFILE_ALIAS(ncclAlltoAll)
NCCL_PROFILE_ALIAS(ncclGather)
NCCL_PROFILE_ALIAS(ncclScatter)
NCCL_PROFILE_ALIAS(ncclGroupSimulateEnd)
NCCL_PROFILE_ALIAS(ncclCommWindowRegister)
NCCL_PROFILE_ALIAS(ncclCommWindowDeregister)
NCCL_PROFILE_ALIAS(ncclLLA2ACalcSlots)
NCCL_PROFILE_ALIAS(ncclLLA2ACreateRequirement)
NCCL_PROFILE_ALIAS(ncclLsaBarrierCreateRequirement)
NCCL_PROFILE_ALIAS(ncclGinBarrierCreateRequirement)
