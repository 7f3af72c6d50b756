/* The NCCL application binary interface as rgpu's shim, worker and fake NCCL use it, written
 * by the project from NCCL's documented API (the user guide's "API" chapter: types, enums,
 * ncclConfig_t and the function signatures) for NCCL 2.27/2.28, the version the GPU hosts run
 * (PyTorch 2.11 cu130's nvidia-nccl wheel). Values are the documented ones; a caller's
 * ncclConfig_t is read only as far as its `size` says. */
#ifndef RGPU_NCCL_ABI_H
#define RGPU_NCCL_ABI_H

#include <stddef.h>

#define NCCL_ABI_MAJOR            2
#define NCCL_ABI_MINOR            28
#define NCCL_ABI_PATCH            9
#define NCCL_ABI_VERSION(x, y, z) ((x)*10000 + (y)*100 + (z))
#define NCCL_UNIQUE_ID_BYTES      128
#define NCCL_SPLIT_NOCOLOR        (-1)
#define NCCL_CONFIG_UNDEF_INT     (-2147483647 - 1)
#define NCCL_CONFIG_MAGIC         0xcafebeefu

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Built-in operations; ncclRedOpCreatePreMulSum hands out values from ncclNumOps up. */
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* ncclConfig_t as NCCL 2.28 declares it (NCCL_CONFIG_INITIALIZER sets size, magic, version and
 * NCCL_CONFIG_UNDEF_INT / NULL in the rest); a caller's config is read only as far as its size. */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

/* ncclGroupSimulateEnd's answer (NCCL_SIM_INFO_INITIALIZER: size, this magic, version, -1). */
#define NCCL_SIM_INFO_MAGIC 0x74685283u
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

/* User buffer windows (ncclCommWindowRegister): an opaque handle of NCCL's. */
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_WIN_DEFAULT        0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_SHRINK_DEFAULT     0x00
#define NCCL_SHRINK_ABORT       0x01

/* The device API's host side (nccl_device.h): a team of ranks, and the resources a device
 * communicator is asked for (ncclDevCommCreate is not offered through rgpu). */
typedef struct {
    int nRanks, rank, stride;
} ncclTeam_t;
typedef unsigned int ncclDevResourceHandle_t;
typedef struct ncclDevResourceRequirements {
    struct ncclDevResourceRequirements *next;
    size_t bufferSize, bufferAlign;
    ncclDevResourceHandle_t *outBufferHandle;
    int ginSignalCount;
    int ginCounterCount;
    unsigned int *outGinSignalStart;
    unsigned int *outGinCounterStart;
} ncclDevResourceRequirements_t;
typedef struct {
    ncclDevResourceHandle_t bufHandle;
    unsigned int nSlots;
} ncclLLA2AHandle_t;
typedef struct {
    ncclDevResourceHandle_t bufHandle;
    int nBarriers;
} ncclLsaBarrierHandle_t;
typedef struct {
    unsigned int signal0;
    ncclDevResourceHandle_t bufHandle;
} ncclGinBarrierHandle_t;

/* Byte size of one element of a data type; 0 for an unknown type. */
static inline size_t nccl_type_size(int t)
{
    static const unsigned char sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

    return t >= 0 && t < ncclNumTypes ? sizes[t] : 0;
}

/* The entry points, as the shim exports them and the worker finds them in the real NCCL. */
typedef struct CUstream_st *nccl_stream_t;
typedef ncclResult_t (*nccl_get_version_fn)(int *version);
typedef ncclResult_t (*nccl_get_unique_id_fn)(ncclUniqueId *id);
typedef ncclResult_t (*nccl_init_rank_config_fn)(ncclComm_t *comm, int nranks, ncclUniqueId id,
                                                 int rank, ncclConfig_t *config);
typedef ncclResult_t (*nccl_init_all_fn)(ncclComm_t *comms, int ndev, const int *devlist);
typedef ncclResult_t (*nccl_split_fn)(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                      ncclConfig_t *config);
typedef ncclResult_t (*nccl_comm_fn)(ncclComm_t comm);
typedef ncclResult_t (*nccl_async_error_fn)(ncclComm_t comm, ncclResult_t *async_error);
typedef ncclResult_t (*nccl_comm_int_fn)(ncclComm_t comm, int *value);
typedef ncclResult_t (*nccl_all_reduce_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           nccl_stream_t stream);
typedef ncclResult_t (*nccl_broadcast_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          nccl_stream_t stream);
typedef ncclResult_t (*nccl_reduce_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                       ncclComm_t comm, nccl_stream_t stream);
typedef ncclResult_t (*nccl_all_gather_fn)(const void *sendbuff, void *recvbuff, size_t sendcount,
                                           ncclDataType_t datatype, ncclComm_t comm,
                                           nccl_stream_t stream);
typedef ncclResult_t (*nccl_reduce_scatter_fn)(const void *sendbuff, void *recvbuff,
                                               size_t recvcount, ncclDataType_t datatype,
                                               ncclRedOp_t op, ncclComm_t comm,
                                               nccl_stream_t stream);
typedef ncclResult_t (*nccl_send_fn)(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, nccl_stream_t stream);
typedef ncclResult_t (*nccl_recv_fn)(void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, nccl_stream_t stream);
typedef ncclResult_t (*nccl_group_fn)(void);
typedef ncclResult_t (*nccl_mem_alloc_fn)(void **ptr, size_t size);
typedef ncclResult_t (*nccl_mem_free_fn)(void *ptr);
typedef ncclResult_t (*nccl_register_fn)(ncclComm_t comm, void *buff, size_t size, void **handle);
typedef ncclResult_t (*nccl_deregister_fn)(ncclComm_t comm, void *handle);
typedef ncclResult_t (*nccl_premulsum_fn)(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                          ncclScalarResidence_t residence, ncclComm_t comm);
typedef ncclResult_t (*nccl_redop_destroy_fn)(ncclRedOp_t op, ncclComm_t comm);
typedef const char *(*nccl_last_error_fn)(ncclComm_t comm);
/* NCCL 2.28's (optional on the worker: an older NCCL lacks them). */
typedef ncclResult_t (*nccl_alltoall_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         nccl_stream_t stream);
typedef ncclResult_t (*nccl_rooted_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       nccl_stream_t stream);
typedef ncclResult_t (*nccl_simulate_fn)(ncclSimInfo_t *info);
typedef ncclResult_t (*nccl_win_register_fn)(ncclComm_t comm, void *buff, size_t size,
                                             ncclWindow_t *win, int flags);
typedef ncclResult_t (*nccl_win_deregister_fn)(ncclComm_t comm, ncclWindow_t win);
typedef ncclResult_t (*nccl_shrink_fn)(ncclComm_t comm, int *exclude, int nexclude,
                                       ncclComm_t *newcomm, ncclConfig_t *config, int flags);
typedef ncclResult_t (*nccl_revoke_fn)(ncclComm_t comm, int flags);
typedef ncclResult_t (*nccl_init_scalable_fn)(ncclComm_t *comm, int nranks, int rank, int nids,
                                              ncclUniqueId *ids, ncclConfig_t *config);
typedef ncclTeam_t (*nccl_team_fn)(ncclComm_t comm);

#endif
