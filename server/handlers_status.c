/* DEVICE_STATUS: memory and utilization of one device for the NVML shim. Memory is the
 * session's view (its quota and what it holds, as cuMemGetInfo reports them); utilization is
 * the whole GPU's, from the host's NVML when there is one. Needs no context. */
#include "server/host_nvml.h"
#include "server/session.h"

CUresult srv_op_device_status(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_DEVICE_STATUS *a = SRV_ARGS(call, DEVICE_STATUS);
    struct srv_gpu_usage usage;
    char pci[32];
    size_t card = 0;
    uint64_t total, free_b;
    CUdevice dev;
    CUresult res;

    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    dev = s->devices[a->dev];
    if ((res = s->drv.cuDeviceTotalMem(&card, dev)) != CUDA_SUCCESS ||
        (res = s->drv.cuDeviceGetPCIBusId(pci, sizeof(pci), dev)) != CUDA_SUCCESS)
        return res;
    srv_host_nvml_usage(pci, &usage);
    total = s->mem_quota != 0 && s->mem_quota < card ? s->mem_quota : card;
    free_b = total > s->mem_used ? total - s->mem_used : 0;
    if (usage.mem_valid && usage.mem_free < free_b) /* other tenants hold the rest */
        free_b = usage.mem_free;
    call->out[call->nout++] = total;
    call->out[call->nout++] = total - free_b;
    call->out[call->nout++] = free_b;
    call->out[call->nout++] = usage.util_valid;
    call->out[call->nout++] = usage.util_gpu;
    call->out[call->nout++] = usage.util_mem;
    if (usage.pcie_valid) /* 16 bits each, valid when not 0 (proto/ops.def) */
        call->out[call->nout++] = (uint64_t)(usage.pcie_gen & 0xffff) |
                                  (uint64_t)(usage.pcie_width & 0xffff) << 16 |
                                  (uint64_t)(usage.pcie_max_gen & 0xffff) << 32 |
                                  (uint64_t)(usage.pcie_max_width & 0xffff) << 48;
    return CUDA_SUCCESS;
}
