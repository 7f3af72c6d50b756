// Shared by the test programs: check every CUDA call and report its error name.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            printf("%s failed: %s\n", #call, cudaGetErrorName(err_));                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
