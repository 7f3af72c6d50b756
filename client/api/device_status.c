/* rgpuDeviceStatus (client/rgpu_ext.h): memory and utilization of one device as the server sees
 * them for this session, for the NVML shim. */
#include <stddef.h>

#include "client/api/api.h"
#include "client/rgpu_ext.h"

_Static_assert(offsetof(struct rgpu_device_status, pcie_valid) == RGPU_DEVICE_STATUS_V1_SIZE,
               "the fields before the PCIe ones keep their place");

CLI_EXPORT CUresult rgpuDeviceStatus(int device, struct rgpu_device_status *status)
{
    uint64_t out[7];
    struct cli_call call = {CLI_ARGS(DEVICE_STATUS), .out = out, .out_cap = 7};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cli_device(device) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (status == NULL || status->size < RGPU_DEVICE_STATUS_V1_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.DEVICE_STATUS.dev = (uint64_t)cli_device_remote(device);
    call.sess = cli_device_session(device);
    if ((res = cli_call_sync(&call)) != CUDA_SUCCESS)
        return res;
    if (call.nout < 6)
        return CUDA_ERROR_UNKNOWN;
    status->mem_total = out[0];
    status->mem_used = out[1];
    status->mem_free = out[2];
    status->util_valid = out[3] != 0;
    status->util_gpu = (uint32_t)out[4];
    status->util_mem = (uint32_t)out[5];
    if (status->size >= sizeof(*status)) { /* the PCIe link, when the server knows it */
        status->pcie_valid = call.nout >= 7;
        status->pcie_gen = call.nout >= 7 ? (uint32_t)(out[6] & 0xffff) : 0;
        status->pcie_width = call.nout >= 7 ? (uint32_t)(out[6] >> 16 & 0xffff) : 0;
        status->pcie_max_gen = call.nout >= 7 ? (uint32_t)(out[6] >> 32 & 0xffff) : 0;
        status->pcie_max_width = call.nout >= 7 ? (uint32_t)(out[6] >> 48) : 0;
    }
    return CUDA_SUCCESS;
}
