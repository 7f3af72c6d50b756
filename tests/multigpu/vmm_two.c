/* Virtual memory management with two devices on two servers that answer the same addresses
 * (multigpu_e2e.sh: FAKECUDA_VA_BASE alike): reservations are kept disjoint from the other
 * server's allocations and reservations, and allocations from the other server's reservations;
 * physical memory of device 1 is made on device 1's server whichever context is current;
 * mapped, opened and used there, it names device 1. Prints PASS.
 * Usage: vmm_two */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "line %d: %s failed: %d\n", __LINE__, #call, (int)r_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "line %d: ", __LINE__);                                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define MB (1ull << 20)

static int apart(CUdeviceptr a, size_t na, CUdeviceptr b, size_t nb)
{
    return a + na <= b || b + nb <= a;
}

int main(void)
{
    CUcontext c0, c1;
    CUdeviceptr a0, a0b, r0, r1;
    CUmemGenericAllocationHandle h1;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}};
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemLocation dev0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    unsigned long long flags = 99;
    size_t gran = 0;
    int ord = -1;
    unsigned char *in = malloc(8 * MB), *out = malloc(8 * MB);

    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&a0, 3 * MB));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAddressReserve(&r1, 8 * MB, 0, 0, 0));
    EXPECT(apart(r1, 8 * MB, a0, 3 * MB), "device 1's reservation %#llx overlaps device 0's memory",
           (unsigned long long)r1);
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAddressReserve(&r0, 8 * MB, 0, 0, 0));
    EXPECT(apart(r0, 8 * MB, r1, 8 * MB), "the two servers' reservations overlap at %#llx",
           (unsigned long long)r0);
    /* Device 1's physical memory, asked from device 0's context. */
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran > 0 && (8 * MB) % gran == 0, "granularity %zu", gran);
    CHECK(cuMemCreate(&h1, 8 * MB, &prop, 0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemMap(r1, 8 * MB, 0, h1, 0));
    CHECK(cuMemSetAccess(r1, 8 * MB, &access, 1));
    CHECK(cuMemGetAccess(&flags, &access.location, r1));
    EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "device 1's access is %llu", flags);
    CHECK(cuMemGetAccess(&flags, &dev0, r1));
    EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE, "device 0 (another server) has access %llu",
           flags);
    for (size_t i = 0; i < 8 * MB; i++)
        in[i] = (unsigned char)(i * 13 + 5);
    CHECK(cuMemcpyHtoD(r1, in, 8 * MB));
    CHECK(cuMemcpyDtoH(out, r1, 8 * MB));
    EXPECT(memcmp(in, out, 8 * MB) == 0, "mapped memory of device 1: wrong bytes");
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, r1 + 4096));
    EXPECT(ord == 1, "device 1's mapped memory names device %d", ord);
    /* Device 0's next allocation stays out of device 1's reservation. */
    CHECK(cuMemAlloc(&a0b, 8 * MB));
    EXPECT(apart(a0b, 8 * MB, r1, 8 * MB), "device 0's memory %#llx lies in device 1's reservation",
           (unsigned long long)a0b);
    CHECK(cuMemFree(a0b));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemUnmap(r1, 8 * MB));
    CHECK(cuMemRelease(h1));
    CHECK(cuMemAddressFree(r1, 8 * MB));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAddressFree(r0, 8 * MB));
    CHECK(cuMemFree(a0));
    free(in), free(out);
    printf("PASS\n");
    return 0;
}
