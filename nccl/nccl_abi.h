/* The NCCL application binary interface as rgpu's shim, worker and fake NCCL use it, written
 * by the project from NCCL's documented API (the user guide's "API" chapter: types, enums,
 * ncclConfig_t and the function signatures) for NCCL 2.27/2.28, the version the GPU hosts run
 * (PyTorch 2.11 cu130's nvidia-nccl wheel). Values are the documented ones; only the members of
 * ncclConfig_t up to commName are declared, and a caller's config is read only as far as its
 * `size` says. */
#ifndef RGPU_NCCL_ABI_H
#define RGPU_NCCL_ABI_H

#include <stddef.h>

#define NCCL_ABI_MAJOR 2
#define NCCL_ABI_MINOR 28
#define NCCL_ABI_PATCH 9
#define NCCL_ABI_VERSION(x, y, z) ((x) * 10000 + (y) * 100 + (z))
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR (-1)
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define NCCL_CONFIG_MAGIC 0xcafebeefu

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

/* The leading members of ncclConfig_t (NCCL_CONFIG_INITIALIZER sets size, magic, version and
 * NCCL_CONFIG_UNDEF_INT / NULL in the rest). */
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
} ncclConfig_t;

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
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, nccl_stream_t stream);
typedef ncclResult_t (*nccl_broadcast_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          nccl_stream_t stream);
typedef ncclResult_t (*nccl_reduce_fn)(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                       ncclComm_t comm, nccl_stream_t stream);
typedef ncclResult_t (*nccl_all_gather_fn)(const void *sendbuff, void *recvbuff,
                                           size_t sendcount, ncclDataType_t datatype,
                                           ncclComm_t comm, nccl_stream_t stream);
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
typedef ncclResult_t (*nccl_register_fn)(ncclComm_t comm, void *buff, size_t size,
                                         void **handle);
typedef ncclResult_t (*nccl_deregister_fn)(ncclComm_t comm, void *handle);
typedef ncclResult_t (*nccl_premulsum_fn)(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                          ncclScalarResidence_t residence, ncclComm_t comm);
typedef ncclResult_t (*nccl_redop_destroy_fn)(ncclRedOp_t op, ncclComm_t comm);
typedef const char *(*nccl_last_error_fn)(ncclComm_t comm);

#endif
