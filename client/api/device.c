/* cuInit and devices: everything is answered from the snapshot the server sent at the
 * handshake, without a round trip. */
#include <stdio.h>
#include <string.h>

#include "client/api/api.h"

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        if (!cli_initialized())                                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

CLI_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return cli_ensure_init();
}

CLI_EXPORT CUresult cuDeviceGetCount(int *count)
{
    NEED_INIT();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cli_device_count();
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    NEED_INIT();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (cli_device(ordinal) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", d->name);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *uuid = d->uuid;
    return CUDA_SUCCESS;
}

/* The v1 ABI (requested by cudart at version 9020) has the same signature. */
CLI_EXPORT CUresult cli_cuDeviceGetUuid_v1(CUuuid *uuid, CUdevice dev) __asm__("cuDeviceGetUuid");
CLI_EXPORT CUresult cli_cuDeviceGetUuid_v1(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

CLI_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    return cli_unsupported("cuDeviceGetLuid");
}

CLI_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = d->total_mem;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (pi == NULL || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = d->attrs[attrib];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *major = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
    *minor = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    const struct cli_device *d;

    NEED_INIT();
    if ((d = cli_device(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (pciBusId == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "%s", d->pci_bus_id);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    NEED_INIT();
    if (dev == NULL || pciBusId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < cli_device_count(); i++) {
        if (strcasecmp(cli_device(i)->pci_bus_id, pciBusId) == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}
