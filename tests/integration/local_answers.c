/* Answers the client gives without a round trip, and setters it sends without waiting:
 *   - cuCtxGetLimit: asked once per limit and context, then answered from the client's cache;
 *     cuCtxSetLimit makes the next read ask again (the driver may round), a launch forgets the
 *     stack size (the driver grows it for a launch that needs more);
 *   - cuFuncSetAttribute: refused locally where the client can check (read-only attribute, a
 *     value out of range), else sent asynchronously; a failure only the driver sees (the fake's
 *     kernels have 1 KiB of static shared memory) is returned by the next synchronizing call;
 *   - a probe's refusal (cuMemHostGetDevicePointer) prints no warning; other refusals do;
 *   - a synchronous HtoD from pageable memory does not wait; its failure comes later.
 * run_programs.sh runs it with RGPU_STATS=1 and checks the round trips in the counts. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

#define ROUNDS     50
#define HTOD_BYTES 4096

static const char ptx[] = ".version 8.0\n.target sm_90\n.entry empty() { ret; }\n";

static void limits(void)
{
    size_t v = 0, first = 0;

    OK(cuCtxGetLimit(&first, CU_LIMIT_PRINTF_FIFO_SIZE));
    for (int i = 0; i < ROUNDS; i++) {
        OK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
        EXPECT(v == first, "printf FIFO size %zu, first %zu", v, first);
    }
    OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 3 << 20));
    for (int i = 0; i < ROUNDS; i++) {
        OK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
        EXPECT(v == 3 << 20, "printf FIFO size after set: %zu", v);
    }
    EXPECT_RESULT(cuCtxGetLimit(NULL, CU_LIMIT_PRINTF_FIFO_SIZE), CUDA_ERROR_INVALID_VALUE);
    printf("limits: %zu, then %zu after set\n", first, v);
}

static void attributes(CUfunction f)
{
    int v = 0;

    for (int i = 0; i < ROUNDS; i++)
        OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1000 + i));
    OK(cuCtxSynchronize()); /* none of them failed */
    EXPECT_RESULT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 300000),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101),
                  CUDA_ERROR_INVALID_VALUE);
    OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    /* Within the device's maximum, but not with the static shared memory: the driver refuses
     * it, after the call returned; the next synchronizing call says so, once. */
    OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232000));
    EXPECT_RESULT(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxSynchronize());
    OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    EXPECT(v == 1024, "max threads per block %d", v);
}

/* A probe's refusal is said at info level (not seen at the default level), any other refusal
 * warns: run_programs.sh reads stderr. */
static void probes(void)
{
    CUdeviceptr d = 0;
    char host[64];

    /* PyTorch's probe: answered now (mapped pinned memory is mirrored on the worker), and for
     * memory that is not pinned refused as the driver does, without a word. */
    EXPECT_RESULT(cuMemHostGetDevicePointer(&d, host, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemAllocManaged(&d, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
}

/* A synchronous HtoD from pageable memory returns once the bytes are sent: the data is there for
 * what follows, the buffer may be reused at once, a failure comes at the next synchronizing
 * call. */
static void htod_pageable(void)
{
    static unsigned char src[HTOD_BYTES], back[HTOD_BYTES];
    CUdeviceptr d;

    NEED(cuMemAlloc(&d, HTOD_BYTES));
    for (int i = 0; i < ROUNDS; i++) {
        memset(src, i, sizeof(src));
        OK(cuMemcpyHtoD(d, src, sizeof(src)));
        memset(src, 0xee, sizeof(src)); /* reused at once */
        OK(cuMemcpyDtoH(back, d, sizeof(back)));
        EXPECT(back[0] == i && back[HTOD_BYTES - 1] == i, "round %d: %d", i, back[0]);
    }
    OK(cuMemcpyHtoD(d + HTOD_BYTES / 2, src, sizeof(src))); /* past the end: fails later */
    EXPECT_RESULT(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxSynchronize());
    OK(cuMemFree(d));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    size_t stack = 0;

    NEED(cuInit(0));
    NEED(cuDeviceGet(&dev, 0));
    NEED(cuCtxCreate(&ctx, NULL, 0, dev));
    NEED(cuModuleLoadData(&mod, ptx));
    NEED(cuModuleGetFunction(&f, mod, "empty"));
    limits();
    attributes(f);
    OK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    OK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE)); /* asked again: the launch may grow it */
    OK(cuCtxSynchronize());
    probes();
    htod_pageable();
    OK(cuModuleUnload(mod));
    OK(cuCtxDestroy(ctx));
    printf("%s\n", failures ? "local_answers: FAILED" : "local_answers: PASS");
    return failures != 0;
}
