/* CUDA IPC between client processes served by the same gpu-server. Each client's worker is a
 * process on the GPU host, so the driver's IPC works between the workers: a handle is made by
 * the exporter's worker, travels through the application as 64 opaque bytes, and is opened by
 * the opener's worker, which answers its own device pointer. The server opens only handles
 * exported by a live session of the opener's tenant (server/handlers_ipc.c); any other, forged
 * bytes included, is CUDA_ERROR_INVALID_VALUE. Clients of different servers cannot share: the
 * handle names memory on another host (INVALID_VALUE too).
 *
 * Opened memory is device memory in the client's records (pointer attributes, copy directions,
 * cuMemGetAddressRange) from the open to cuIpcCloseMemHandle. With several servers the opener's
 * worker picks the address alone, and opening again would give the same one: an opened range
 * that overlaps an address the client knows on another server is closed and the open refused
 * (CUDA_ERROR_MAP_FAILED); later allocations keep clear of opened ranges as of any other
 * (docs/ARCHITECTURE.md, "Unified addresses"). */
#include <string.h>

#include "client/objects/address_ranges.h"
#include "client/api/api.h"

CLI_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    struct cli_call call = {CLI_ARGS(IPC_GET_MEM_HANDLE, .dptr = dptr), .rdata = handle,
                            .rdata_cap = sizeof(*handle)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.rdata_len != sizeof(*handle))
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

/* Several servers: does the range the opener's worker answered overlap another server's? (The
 * same handle opened again in one context answers the range already opened: no clash.) */
static bool opened_clashes(uintptr_t base, size_t size)
{
    struct cli_ctx *cur = cli_ctx_current();
    struct mem_range r;

    if (cli_session_count() < 2)
        return false;
    if (addr_range_find(MEM_DEVICE, base, &r) && r.base == base && (r.flags & MEM_DEV_IPC_OPENED) &&
        r.ctx == cur)
        return false;
    return addr_range_overlaps(MEM_DEVICE, base, size) || cli_vmm_reserved_overlaps(base, size);
}

/* cuda.h maps cuIpcOpenMemHandle to the _v2 symbol; both have this signature. */
CLI_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    uint64_t out[2];
    struct cli_call call = {CLI_ARGS(IPC_OPEN_MEM_HANDLE, .flags = flags), .data = &handle,
                            .data_len = sizeof(handle), .out = out, .out_cap = 2};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout < 2)
        res = CUDA_ERROR_UNKNOWN;
    if (res != CUDA_SUCCESS)
        return res;
    if (opened_clashes((uintptr_t)out[0], (size_t)out[1])) {
        rg_error("cuIpcOpenMemHandle: %s mapped it at %#llx, where another server's device "
                 "memory is: refused",
                 cli_session_server(cli_ctx_current()->sess), (unsigned long long)out[0]);
        (void)cli_call_sync(&(struct cli_call){CLI_ARGS(IPC_CLOSE_MEM_HANDLE, .dptr = out[0])});
        return CUDA_ERROR_MAP_FAILED;
    }
    addr_range_add(MEM_DEVICE, (uintptr_t)out[0], (size_t)out[1], cli_ctx_current(),
                   MEM_DEV_IPC_OPENED);
    *dptr = (CUdeviceptr)out[0];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cli_cuIpcOpenMemHandle_v1(CUdeviceptr *dptr, CUipcMemHandle handle,
                                              unsigned int flags) __asm__("cuIpcOpenMemHandle");
CLI_EXPORT CUresult cli_cuIpcOpenMemHandle_v1(CUdeviceptr *dptr, CUipcMemHandle handle,
                                              unsigned int flags)
{
    return cuIpcOpenMemHandle(dptr, handle, flags);
}

CLI_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct cli_call call = {CLI_ARGS(IPC_CLOSE_MEM_HANDLE, .dptr = dptr)};
    struct mem_range r;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (!addr_range_find(MEM_DEVICE, (uintptr_t)dptr, &r) || r.base != (uintptr_t)dptr ||
        !(r.flags & MEM_DEV_IPC_OPENED))
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS)
        addr_range_remove(MEM_DEVICE, (uintptr_t)dptr, NULL);
    return res;
}

CLI_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
    struct cli_call call = {CLI_ARGS(IPC_GET_EVENT_HANDLE), .rdata = handle,
                            .rdata_cap = sizeof(*handle)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_event_ids(event, &call.a.IPC_GET_EVENT_HANDLE.event, &call))
        return CUDA_ERROR_INVALID_HANDLE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.rdata_len != sizeof(*handle))
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

/* The opened event is an ordinary event of the opener (cuEventDestroy ends it), created with
 * the flags every IPC event has. */
CLI_EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
    struct cli_call call = {CLI_ARGS(IPC_OPEN_EVENT_HANDLE), .data = &handle,
                            .data_len = sizeof(handle)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (event == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cli_event_bind(&call, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, event);
}
