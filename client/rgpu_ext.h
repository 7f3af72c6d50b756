/* Entry points that libcuda.so.1 exports beside the CUDA driver API, for rgpu's own libraries
 * in the application's process (the NVML shim, nvml/). Looked up with dlsym; not for
 * applications. */
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

#endif
