/* Device queries of the NVML shim: handles, names, UUIDs and PCI facts from the snapshot taken
 * at nvmlInit; memory and utilization asked of the server each time (rgpuDeviceStatus). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvml/nvml_shim.h"

const struct nvml_dev *nvml_dev_check(nvmlDevice_t device)
{
    const struct nvml_state *s = nvml_state();
    const struct nvml_dev *d = (const struct nvml_dev *)device;

    if (s == NULL || d < &s->devs[0] || d >= &s->devs[s->count])
        return NULL;
    return d;
}

/* Common checks of a device query: initialized, a known handle, an output pointer. */
#define DEVICE_ARGS(handle, out, d_p)                                                              \
    do {                                                                                           \
        if (nvml_state() == NULL)                                                                  \
            return NVML_ERROR_UNINITIALIZED;                                                       \
        if ((*(d_p) = nvml_dev_check(handle)) == NULL || (out) == NULL)                            \
            return NVML_ERROR_INVALID_ARGUMENT;                                                    \
    } while (0)

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    const struct nvml_state *s = nvml_state();

    if (s == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)s->count;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    const struct nvml_state *s = nvml_state();

    if (s == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned)s->count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&s->devs[index];
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    const struct nvml_state *s = nvml_state();

    if (s == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < s->count; i++) {
        if (strcasecmp(s->devs[i].uuid, uuid) == 0) {
            *device = (nvmlDevice_t)&s->devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* "domain:bus:device[.function]" in hex, with any number of domain digits. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                          nvmlDevice_t *device)
{
    const struct nvml_state *s = nvml_state();
    unsigned domain, bus, dev;

    if (s == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL ||
        sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &dev) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < s->count; i++) {
        const nvmlPciInfo_t *p = &s->devs[i].pci;
        if (p->domain == domain && p->bus == bus && p->device == dev) {
            *device = (nvmlDevice_t)&s->devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, index, &d);
    *index = (unsigned)d->index;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src)
{
    if (strlen(src) >= len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, name, &d);
    return copy_string(name, length, d->name);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, uuid, &d);
    return copy_string(uuid, length, d->uuid);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, pci, &d);
    *pci = d->pci;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                            int *minor)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, major, &d);
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}

/* The server's answer for one device. */
static nvmlReturn_t device_status(const struct nvml_dev *d, struct rgpu_device_status *st)
{
    memset(st, 0, sizeof(*st));
    st->size = sizeof(*st);
    return nvml_state()->cl.rgpuDeviceStatus(d->index, st) == CUDA_SUCCESS ? NVML_SUCCESS
                                                                           : NVML_ERROR_GPU_IS_LOST;
}

/* The session's view: total is its quota (or the device), used what it holds. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct rgpu_device_status st;
    const struct nvml_dev *d;
    nvmlReturn_t ret;

    DEVICE_ARGS(device, memory, &d);
    if ((ret = device_status(d, &st)) != NVML_SUCCESS)
        return ret;
    memory->total = st.mem_total;
    memory->free = st.mem_free;
    memory->used = st.mem_used;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct rgpu_device_status st;
    const struct nvml_dev *d;
    nvmlReturn_t ret;

    DEVICE_ARGS(device, memory, &d);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if ((ret = device_status(d, &st)) != NVML_SUCCESS)
        return ret;
    memory->total = st.mem_total;
    memory->reserved = 0;
    memory->free = st.mem_free;
    memory->used = st.mem_used;
    return NVML_SUCCESS;
}

/* The whole GPU's utilization, when the server's host can read it. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                       nvmlUtilization_t *utilization)
{
    struct rgpu_device_status st;
    const struct nvml_dev *d;
    nvmlReturn_t ret;

    DEVICE_ARGS(device, utilization, &d);
    if ((ret = device_status(d, &st)) != NVML_SUCCESS)
        return ret;
    if (!st.util_valid)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = st.util_gpu;
    utilization->memory = st.util_mem;
    return NVML_SUCCESS;
}

/* Processes of other tenants are not this session's to see; its own run on the server. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, infoCount, &d);
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define NO_PROCESSES(name)                                                                         \
    NVML_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, void *infos)       \
    {                                                                                              \
        return no_processes(device, infoCount);                                                    \
    }
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3)

/* The PCIe link of the server's GPU, from its host's NVML (XLA reads the current link to
 * estimate host-device bandwidth); not supported when the server's host has no NVML. */
static nvmlReturn_t pcie_link(nvmlDevice_t device, unsigned int *out, int which)
{
    struct rgpu_device_status st;
    const struct nvml_dev *d;
    nvmlReturn_t ret;

    DEVICE_ARGS(device, out, &d);
    if ((ret = device_status(d, &st)) != NVML_SUCCESS)
        return ret;
    if (!st.pcie_valid)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = which == 0   ? st.pcie_gen
           : which == 1 ? st.pcie_width
           : which == 2 ? st.pcie_max_gen
                        : st.pcie_max_width;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *g)
{
    return pcie_link(device, g, 0);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *w)
{
    return pcie_link(device, w, 1);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *g)
{
    return pcie_link(device, g, 2);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *w)
{
    return pcie_link(device, w, 3);
}

/* Fields (NVLink counts and speeds, counters...) are not forwarded: the call succeeds and each
 * field says NOT_SUPPORTED, as NVML does for a field a device lacks, so callers that ask on
 * start (XLA) go on without an error. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                  nvmlFieldValue_t *values)
{
    const struct nvml_dev *d;

    DEVICE_ARGS(device, values, &d);
    if (count < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
