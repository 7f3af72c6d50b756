// Driver API: load a PTX module, launch its kernel with kernelParams and with the `extra`
// buffer form, check the results.
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "driver_common.h"

int main()
{
    const int n = 100000;
    std::vector<float> x(n), y(n);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr dx, dy;
    float a = 3.0f;
    int bad = 0, count = n;

    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 100);
        y[i] = 1.0f;
    }
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&f, mod, "saxpy_ptx"));
    // Occupancy, asked as libraries ask it: many times with the same arguments (rgpu caches
    // the answer), then again once an attribute that may change it was set.
    int occ[3];
    for (int i = 0; i < 20; i++)
        CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ[0], f, 128, 0));
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ[1], f, 256, 0));
    CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ[2], f, 128, 0));
    printf("occupancy: %d blocks of 128, %d of 256; %d of 128 with a 50%% carveout\n", occ[0],
           occ[1], occ[2]);
    CHECK(cuMemAlloc(&dx, n * sizeof(float)));
    CHECK(cuMemAlloc(&dy, n * sizeof(float)));
    CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
    CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
    void *params[] = {&a, &dx, &dy, &count};
    CHECK(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    // The same launch through the `extra` form: one buffer laid out like the parameters.
    struct {
        float a;
        int pad;
        CUdeviceptr x, y;
        int n;
    } buf = {a, 0, dx, dy, count};
    size_t size = offsetof(decltype(buf), n) + sizeof(int); // no trailing padding
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
    // A third time from a module JIT-linked from the same PTX (cuLink*), with its logs.
    CUlinkState link;
    CUmodule linked;
    CUfunction g;
    char info[1024] = "unset", error[1024] = "unset";
    void *cubin;
    size_t cubin_len;
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {info, (void *)sizeof(info), error, (void *)sizeof(error)};
    CHECK(cuLinkCreate(4, opts, vals, &link));
    CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)ptx, sizeof(ptx), "saxpy.ptx", 0, NULL,
                        NULL));
    CHECK(cuLinkComplete(link, &cubin, &cubin_len));
    CHECK(cuModuleLoadData(&linked, cubin));
    CHECK(cuLinkDestroy(link));
    printf("linked a cubin: %s; error log empty: %s\n", cubin_len > 0 ? "yes" : "no",
           error[0] == 0 ? "yes" : "no");
    CHECK(cuModuleGetFunction(&g, linked, "saxpy_ptx"));
    CHECK(cuLaunchKernel(g, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuModuleUnload(linked));
    CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
    for (int i = 0; i < n; i++)
        bad += y[i] != 1.0f + 3 * a * (float)(i % 100);
    printf("ptx saxpy three times over %d floats: %d mismatches, y[99] = %.1f\n", n, bad, y[99]);
    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxDestroy(ctx));
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
