// Driver API: load a PTX module, launch its kernel with kernelParams and with the `extra`
// buffer form, check the results.
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <vector>

#include <cuda.h>

#define CHECK(call)                                                                            \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            const char *n_ = "?";                                                              \
            cuGetErrorName(r_, &n_);                                                           \
            printf("%s failed: %s\n", #call, n_);                                              \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

// saxpy_ptx(float a, const float *x, float *y, int n): y = a * x + y
static const char ptx[] =
    ".version 9.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry saxpy_ptx(\n"
    " .param .f32 saxpy_ptx_param_0,\n"
    " .param .u64 saxpy_ptx_param_1,\n"
    " .param .u64 saxpy_ptx_param_2,\n"
    " .param .u32 saxpy_ptx_param_3\n"
    ")\n"
    "{\n"
    " .reg .pred  %p<2>;\n"
    " .reg .f32  %f<5>;\n"
    " .reg .b32  %r<6>;\n"
    " .reg .b64  %rd<8>;\n"
    " ld.param.f32  %f1, [saxpy_ptx_param_0];\n"
    " ld.param.u64  %rd1, [saxpy_ptx_param_1];\n"
    " ld.param.u64  %rd2, [saxpy_ptx_param_2];\n"
    " ld.param.u32  %r2, [saxpy_ptx_param_3];\n"
    " mov.u32  %r3, %ctaid.x;\n"
    " mov.u32  %r4, %ntid.x;\n"
    " mov.u32  %r5, %tid.x;\n"
    " mad.lo.s32  %r1, %r3, %r4, %r5;\n"
    " setp.ge.s32  %p1, %r1, %r2;\n"
    " @%p1 bra  $L__BB0_2;\n"
    " cvta.to.global.u64  %rd3, %rd2;\n"
    " cvta.to.global.u64  %rd4, %rd1;\n"
    " mul.wide.s32  %rd5, %r1, 4;\n"
    " add.s64  %rd6, %rd4, %rd5;\n"
    " ld.global.f32  %f2, [%rd6];\n"
    " add.s64  %rd7, %rd3, %rd5;\n"
    " ld.global.f32  %f3, [%rd7];\n"
    " fma.rn.f32  %f4, %f2, %f1, %f3;\n"
    " st.global.f32  [%rd7], %f4;\n"
    "$L__BB0_2:\n"
    " ret;\n"
    "}\n"
    ;

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
