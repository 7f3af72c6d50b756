/* Entry points that libcuda.so.1 exports beside the CUDA driver API, for rgpu's own libraries
 * in the application's process (the NVML shim, nvml/; the NCCL shim, nccl/). Looked up with
 * dlsym; not for applications. */
#ifndef RGPU_CLIENT_RGPU_EXT_H
#define RGPU_CLIENT_RGPU_EXT_H

#include <stdint.h>

/* What the server says about one device of this session. */
struct rgpu_device_status {
    uint32_t size;       /* the caller sets sizeof(struct rgpu_device_status) */
    uint32_t util_valid; /* 1 when the server's host could read the GPU's utilization */
    uint64_t mem_total;  /* the session's quota, or the device's memory without one */
    uint64_t mem_used;   /* what this session holds */
    uint64_t mem_free;   /* what it may still allocate */
    uint32_t util_gpu;   /* percent of time a kernel ran (the whole GPU, all tenants) */
    uint32_t util_mem;   /* percent of time memory was read or written (the whole GPU) */
    /* Since the PCIe fields: a caller whose size stops before them gets the fields above. */
    uint32_t pcie_valid; /* 1 when the server's host could read the PCIe link */
    uint32_t pcie_gen, pcie_width, pcie_max_gen, pcie_max_width;
};
#define RGPU_DEVICE_STATUS_V1_SIZE 40 /* up to util_mem */

/* Ask the server (CUresult; CUDA_SUCCESS = 0). Needs cuInit; no context. */
typedef int (*rgpu_device_status_fn)(int device, struct rgpu_device_status *status);
#define RGPU_DEVICE_STATUS_SYMBOL "rgpuDeviceStatus"

/* One NCCL operation (proto/ops.def, NCCL_GET_VERSION .. NCCL_REDOP_DESTROY and, since 1.3,
 * NCCL_COLL_EXT .. NCCL_COMM_QUERY) in the session's
 * ordered call stream, for the NCCL shim. args[stream_arg] (when stream_arg < nargs) holds the
 * application's CUstream and is replaced by its wire id. async: sent without waiting (NOREPLY;
 * a failure comes back at the next synchronous call); else out[] and rdata receive the reply. */
#define RGPU_NCCL_MAX_ARGS 12
struct rgpu_nccl_call {
    uint32_t size; /* the caller sets sizeof(struct rgpu_nccl_call) */
    uint32_t op;
    uint32_t nargs;
    uint32_t stream_arg;
    uint32_t async;
    uint32_t nout;
    uint64_t args[RGPU_NCCL_MAX_ARGS];
    uint64_t out[4];
    const void *data;
    uint64_t data_len;
    void *rdata;
    uint64_t rdata_cap;
    uint64_t rdata_len;
    /* Optional (a caller built before it passes RGPU_NCCL_CALL_V1_SIZE): called once, with the
     * session's lock held, just before the call goes on the wire, so before a synchronous
     * call's reply is waited for (the shim lets other threads' calls go to other servers
     * meanwhile). */
    void (*on_send)(void *arg);
    void *on_send_arg;
};
#define RGPU_NCCL_CALL_V1_SIZE 192 /* up to rdata_len */

/* Returns a CUresult: CUDA_ERROR_INVALID_VALUE for an op that is not an NCCL one, the context or
 * stream errors of a driver call, or the call's own. */
typedef int (*rgpu_nccl_call_fn)(struct rgpu_nccl_call *call);
#define RGPU_NCCL_CALL_SYMBOL "rgpuNcclCall"

#endif
