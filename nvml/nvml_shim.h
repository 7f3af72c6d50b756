/* The NVML shim (libnvidia-ml.so.1): what frameworks and monitoring tools read through NVML,
 * answered from the rgpu session of the same process. Device facts come from the client
 * libcuda.so.1's driver API (its handshake snapshot); memory and utilization from the server
 * through the client's rgpuDeviceStatus (client/rgpu_ext.h). */
#ifndef RGPU_NVML_SHIM_H
#define RGPU_NVML_SHIM_H

#include <cuda.h>
#include <stdbool.h>

#include "client/rgpu_ext.h"
#include "nvml/nvml_abi.h"

#define NVML_EXPORT           __attribute__((visibility("default")))
#define NVML_SHIM_MAX_DEVICES 64

struct nvml_dev {
    int index;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* "GPU-xxxxxxxx-xxxx-..." */
    nvmlPciInfo_t pci;
    int cc_major, cc_minor;
};

/* The client's entry points the shim calls. */
struct nvml_client {
    void *dl;
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*cuDeviceGetPCIBusId)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    rgpu_device_status_fn rgpuDeviceStatus;
};

struct nvml_state {
    int count;
    int cuda_version; /* cuDriverGetVersion */
    struct nvml_dev devs[NVML_SHIM_MAX_DEVICES];
    struct nvml_client cl;
};

/* The state when NVML is initialized (nvmlInit not yet matched by nvmlShutdown), else NULL. */
const struct nvml_state *nvml_state(void);
/* The device behind a handle the shim gave out, or NULL. */
const struct nvml_dev *nvml_dev_check(nvmlDevice_t device);
/* Log an unsupported entry point once by name; returns NVML_ERROR_NOT_SUPPORTED. */
int nvml_unsupported(const char *name);

#endif
