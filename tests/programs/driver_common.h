// Shared by the driver-API test programs: check every driver call (the program returns 1 with
// the error's name), and a saxpy kernel as PTX text for cuModuleLoadData and the JIT.
#pragma once
#include <cstdio>

#include <cuda.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            printf("%s failed: %s\n", #call, n_);                                                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

// saxpy_ptx(float a, const float *x, float *y, int n): y = a * x + y
// clang-format off
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
// clang-format on
