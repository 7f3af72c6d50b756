/* The server's driver backend: the real libcuda.so.1 (or the test double tests/fakecuda) opened
 * with dlopen, every entry point the worker uses resolved once by its ABI name.
 *
 * Names below go through cuda.h's own #defines, so `drv->cuMemAlloc` is the member for the
 * symbol "cuMemAlloc_v2" with exactly that ABI. A backend missing any of them is refused at
 * load with the missing name logged. */
#ifndef RGPU_SERVER_DRIVER_H
#define RGPU_SERVER_DRIVER_H

#include <cuda.h>

#include "common/status.h"

/* One row per group of entry points, kept by hand. */
/* clang-format off */
#define SRV_DRIVER_FUNCS(X)                                                                     \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                       \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetUuid)                    \
    X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)                          \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)         \
    X(cuDevicePrimaryCtxSetFlags)                                                               \
    X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize)    \
    X(cuCtxSetLimit) X(cuCtxGetLimit) X(cuCtxSetCacheConfig)                                    \
    X(cuMemAlloc) X(cuMemAllocPitch) X(cuMemFree) X(cuMemGetInfo) X(cuMemHostAlloc)             \
    X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemHostGetDevicePointer)   \
    X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemcpyDtoHAsync)                  \
    X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync)                                                        \
    X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32)                                                 \
    X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async)                                  \
    X(cuMemsetD2D8) X(cuMemsetD2D16) X(cuMemsetD2D32)                                           \
    X(cuMemsetD2D8Async) X(cuMemsetD2D16Async) X(cuMemsetD2D32Async)                            \
    X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)          \
    X(cuModuleGetGlobal)                                                                        \
    X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuLibraryGetModule)         \
    X(cuLibraryGetGlobal)                                                                       \
    X(cuKernelGetFunction) X(cuKernelGetAttribute) X(cuKernelSetAttribute)                      \
    X(cuKernelSetCacheConfig) X(cuKernelGetParamInfo)                                           \
    X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncSetCacheConfig) X(cuFuncGetParamInfo)   \
    X(cuLaunchKernel) X(cuLaunchKernelEx)                                                       \
    X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)    \
    X(cuStreamWaitEvent)                                                                        \
    X(cuEventCreate) X(cuEventDestroy) X(cuEventRecordWithFlags) X(cuEventSynchronize)          \
    X(cuEventQuery) X(cuEventElapsedTime)                                                       \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyMaxActiveClusters)     \
    X(cuOccupancyAvailableDynamicSMemPerBlock) X(cuOccupancyMaxPotentialBlockSizeWithFlags)     \
    X(cuMemAllocAsync) X(cuMemFreeAsync)                                                        \
    X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)                \
    X(cuGraphLaunch) X(cuGraphUpload) X(cuGraphExecDestroy) X(cuGraphDestroy)                  \
    X(cuThreadExchangeStreamCaptureMode) X(cuGraphGetNodes)                                    \
    X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)      \
    X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAccess) X(cuMemGetAllocationGranularity)         \
    X(cuDeviceGetDefaultMemPool) X(cuDeviceSetMemPool) X(cuMemPoolCreate) X(cuMemPoolDestroy)  \
    X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuMemPoolSetAccess) \
    X(cuMemAllocFromPoolAsync)                                                                 \
    X(cuGraphCreate) X(cuGraphAddKernelNode) X(cuGraphAddMemsetNode) X(cuGraphAddMemcpyNode)   \
    X(cuGraphAddEmptyNode) X(cuGraphAddEventWaitNode) X(cuGraphAddEventRecordNode)             \
    X(cuGraphAddChildGraphNode) X(cuGraphAddMemAllocNode) X(cuGraphAddMemFreeNode)             \
    X(cuGraphAddDependencies) X(cuGraphClone) X(cuGraphNodeGetType)                            \
    X(cuGraphGetRootNodes) X(cuGraphNodeGetDependencies) X(cuGraphNodeGetDependentNodes)        \
    X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecMemcpyNodeSetParams)                        \
    X(cuGraphExecChildGraphNodeSetParams) X(cuGraphNodeSetEnabled) X(cuGraphNodeGetEnabled)     \
    X(cuGraphExecKernelNodeSetParams) X(cuGraphExecUpdate) X(cuMemcpy2D) X(cuMemcpy2DAsync)  \
    X(cuLinkCreate) X(cuLinkAddData) X(cuLinkComplete) X(cuLinkDestroy)            \
    X(cuTensorMapEncodeTiled) X(cuTensorMapEncodeIm2col) X(cuTensorMapEncodeIm2colWide)         \
    X(cuTensorMapReplaceAddress) X(cuStreamSetAttribute) X(cuStreamGetAttribute)             \
    X(cuCtxResetPersistingL2Cache)                                                             \
    X(cuDeviceGetGraphMemAttribute) X(cuDeviceSetGraphMemAttribute) X(cuDeviceGraphMemTrim)    \
    X(cuLaunchHostFunc) X(cuGraphAddHostNode) X(cuModuleGetFunctionCount)                     \
    X(cuModuleEnumerateFunctions) X(cuFuncGetName)                                              \
    X(cuArray3DCreate) X(cuArrayDestroy) X(cuMemcpy3D) X(cuMemcpy3DAsync) X(cuTexObjectCreate) \
    X(cuTexObjectDestroy) X(cuSurfObjectCreate) X(cuSurfObjectDestroy)                        \
    X(cuGraphAddNode) X(cuGraphConditionalHandleCreate) X(cuStreamBeginCaptureToGraph)         \
    X(cuMemGetHandleForAddressRange) X(cuFlushGPUDirectRDMAWrites)                            \
    X(cuStreamGetCaptureInfo) X(cuStreamUpdateCaptureDependencies)                            \
    X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) X(cuIpcGetEventHandle)   \
    X(cuIpcOpenEventHandle) X(cuMemGetAddressRange) X(cuDeviceCanAccessPeer)                  \
    X(cuDeviceGetP2PAttribute) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess)
/* clang-format on */

struct srv_driver {
    void *dl;
    char path[256];
#define SRV_DRIVER_MEMBER(fn) __typeof__(fn) *fn;
    SRV_DRIVER_FUNCS(SRV_DRIVER_MEMBER)
#undef SRV_DRIVER_MEMBER
};

/* Open the driver at path (default "libcuda.so.1") and resolve every entry point. */
rg_status_t srv_driver_open(const char *path, struct srv_driver *drv);
void srv_driver_close(struct srv_driver *drv);

#endif
