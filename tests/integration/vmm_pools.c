/* Virtual memory management, memory pools and stream attributes through the client: reserve,
 * create, map, set access, copy through the mapping (with the direction inferred by cuMemcpy),
 * retain the handle, unmap, release; default and created pools, their attributes, allocation from a
 * pool, the device's current pool. Prints PASS when everything matched. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static unsigned char in[1 << 16], out[1 << 16];

static void check_vmm(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemAllocationProp got;
    CUmemGenericAllocationHandle h, h2;
    unsigned long long flags = 0;
    CUdeviceptr va;
    size_t gran = 0;

    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran >= 4096, "granularity %zu", gran);
    OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    OK(cuMemCreate(&h, gran, &prop, 0));
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    EXPECT(got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED, "properties");
    OK(cuMemMap(va + gran, gran, 0, h, 0));
    OK(cuMemSetAccess(va + gran, gran, &rw, 1));
    OK(cuMemGetAccess(&flags, &rw.location, va + gran));
    EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access flags %llu", flags);
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (unsigned char)(i * 7 + 3);
    OK(cuMemcpy(va + gran, (CUdeviceptr)(uintptr_t)in, sizeof(in))); /* direction inferred */
    OK(cuMemsetD8(va + gran, 0x5a, 16));
    OK(cuMemcpyDtoH(out, va + gran, sizeof(out)));
    memset(in, 0x5a, 16);
    EXPECT(memcmp(in, out, sizeof(in)) == 0, "data through the mapping");
    OK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + gran + 100)));
    EXPECT(h2 == h, "retained handle");
    OK(cuMemRelease(h2));
    OK(cuMemUnmap(va + gran, gran));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 2 * gran));
}

static void check_pools(CUstream st)
{
    CUmemoryPool def, cur, pool;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    cuuint64_t threshold = 64ull << 20, v = 0, used = 0;
    int reuse = -1;
    CUdeviceptr d;

    OK(cuDeviceGetDefaultMemPool(&def, 0));
    OK(cuDeviceGetMemPool(&cur, 0));
    EXPECT(cur == def, "the current pool starts as the default pool");
    OK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    EXPECT(v == threshold, "release threshold %llu", (unsigned long long)v);
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    EXPECT(reuse == 0 || reuse == 1, "int attribute %d", reuse);

    OK(cuMemPoolCreate(&pool, &props));
    OK(cuMemAllocFromPoolAsync(&d, sizeof(in), pool, st));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    EXPECT(used >= sizeof(in), "pool used %llu", (unsigned long long)used);
    OK(cuMemcpyHtoDAsync(d, in, sizeof(in), st));
    OK(cuMemcpyDtoHAsync(out, d, sizeof(out), st));
    OK(cuMemFreeAsync(d, st));
    OK(cuStreamSynchronize(st));
    EXPECT(memcmp(in, out, sizeof(in)) == 0, "data through a pool allocation");
    OK(cuDeviceSetMemPool(0, pool));
    OK(cuDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool, "the device's current pool");
    OK(cuMemAllocAsync(&d, 4096, st)); /* from the current pool */
    OK(cuMemFreeAsync(d, st));
    OK(cuStreamSynchronize(st));
    OK(cuMemPoolTrimTo(pool, 0));
    OK(cuDeviceSetMemPool(0, def));
    OK(cuMemPoolDestroy(pool));
    EXPECT(cuMemPoolDestroy(def) != CUDA_SUCCESS, "the default pool cannot be destroyed");
}

/* Stream attributes travel to the server's stream and back. */
static void check_stream_attrs(CUstream st)
{
    CUstreamAttrValue v = {0}, got = {0};

    v.syncPolicy = CU_SYNC_POLICY_YIELD;
    OK(cuStreamSetAttribute(st, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    OK(cuStreamGetAttribute(st, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got));
    EXPECT(got.syncPolicy == CU_SYNC_POLICY_YIELD, "sync policy %d", (int)got.syncPolicy);
}

/* Physical memory belongs to a device: natively its calls work with no context current. */
static void check_vmm_no_context(CUdevice dev)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    CUmemGenericAllocationHandle h;
    CUcontext cur = (CUcontext)1;
    size_t gran = 0;

    OK(cuCtxGetCurrent(&cur));
    EXPECT(cur == NULL, "a context current before any was made");
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    OK(cuMemCreate(&h, gran, &prop, 0));
    OK(cuMemRelease(h));
}

int main(void)
{
    CUcontext ctx;
    CUdevice dev;
    CUstream st;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
        printf("FAIL: no device\n");
        return 1;
    }
    check_vmm_no_context(dev);
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    check_vmm();
    check_pools(st);
    check_stream_attrs(st);
    OK(cuStreamDestroy(st));
    OK(cuDevicePrimaryCtxRelease(dev));
    if (failures == 0)
        printf("PASS\n");
    return failures != 0;
}
