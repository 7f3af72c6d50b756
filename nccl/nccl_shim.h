/* Private to the NCCL shim (nccl/): its communicators and the client library it talks through. */
#ifndef RGPU_NCCL_SHIM_H
#define RGPU_NCCL_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "client/rgpu_ext.h"
#include "nccl/nccl_abi.h"
#include "proto/ops.h"

#define NCCL_EXPORT __attribute__((visibility("default")))
/* NCCL also exports each entry point as pnccl* (for profilers); so does the shim. */
#define NCCL_PROFILE_ALIAS(name)                                                                   \
    extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")));

/* What the application's ncclComm_t points at: the worker knows the communicator by id. */
#define NCCL_SHIM_COMM_MAGIC 0x6e63636cu
struct ncclComm {
    uint32_t magic;        /* NCCL_SHIM_COMM_MAGIC while alive */
    int nranks, rank, dev; /* nranks -1: not known yet (made in a group, or still in progress) */
    int blocking;          /* the application's config.blocking (1 unless it said 0) */
    uint64_t id;
};

/* The process's client libcuda.so.1 (the one already loaded, else the one beside this library),
 * cuInit done; NULL (logged once) when it is not there or not rgpu's. */
struct nccl_client {
    rgpu_nccl_call_fn call;
    CUresult (*cuCtxGetDevice)(CUdevice *dev);
    CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
};
const struct nccl_client *nccl_client(void);

/* Run one operation synchronously: ncclSuccess and out[] filled, or the error (the worker's
 * out[0], or the mapping of a driver-level failure), remembered for ncclGetLastError.
 * comm (may be NULL): the communicator the call is about; it goes to the session of its device
 * (a process may have a session per server: a thread whose current context is another
 * server's, or none, such as PyTorch's watchdog thread, still reaches the right worker). */
ncclResult_t nccl_call_sync(struct rgpu_nccl_call *c, const struct ncclComm *comm,
                            const char *what);
/* Send one without waiting (collectives, groups). */
ncclResult_t nccl_call_async(struct rgpu_nccl_call *c, const struct ncclComm *comm,
                             const char *what);
/* Groups (nccl_client.c). A thread's group goes out whole: from its outermost ncclGroupStart
 * to its ncclGroupEnd it holds the shim's order lock, which every NCCL call of the other threads
 * takes until it is on the wire (the worker runs one NCCL group per session: another thread's
 * calls inside it would join it). The group is opened on a worker by its first call there and ended
 * on every worker it reached (a process's devices may be on several servers). nccl_group_end ends
 * one level; the outermost sends op (NCCL_GROUP, or NCCL_GROUP_SIMULATE: the lowest device's
 * estimate in *sim). */
void nccl_group_start(void);
ncclResult_t nccl_group_end(uint32_t op, uint64_t *sim, const char *what);
int nccl_group_depth(void);
/* Remember an error of the shim's own checks for ncclGetLastError; returns res. */
ncclResult_t nccl_fail(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The worker's NCCL_FEAT_* (asked once, with its version); 0 when it cannot say. */
uint64_t nccl_features(void);
/* ncclInvalidUsage (logged once) when the worker's NCCL lacks `feature`, else ncclSuccess. */
ncclResult_t nccl_need(uint64_t feature, const char *name);
/* nranks and rank of comm, asking the worker when they are not known yet. */
void nccl_comm_refresh(struct ncclComm *comm);
/* A live communicator of this shim, or NULL. */
struct ncclComm *nccl_comm_check(ncclComm_t comm);
/* The config words of the wire (nccl/nccl_wire.h) from an application's config (NULL: unset). */
void nccl_config_words(const ncclConfig_t *config, uint64_t *words);

/* Exported entry points the shim itself calls. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#endif
