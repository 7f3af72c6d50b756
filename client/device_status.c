/* rgpuDeviceStatus (client/rgpu_ext.h): memory and utilization of one device as the server sees
 * them for this session, for the NVML shim. */
#include "client.h"
#include "rgpu_ext.h"

CLI_EXPORT CUresult rgpuDeviceStatus(int device, struct rgpu_device_status *status)
{
    uint64_t out[6];
    struct cli_call call = {CLI_ARGS(DEVICE_STATUS), .out = out, .out_cap = 6};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cli_device(device) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (status == NULL || status->size < sizeof(*status))
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
    return CUDA_SUCCESS;
}
