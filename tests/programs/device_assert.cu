// A device-side assert: the kernel's message reaches stderr as it does locally, the launch's
// error is cudaErrorAssert, and it stays (the context is unusable afterwards, as in CUDA).
#include <cassert>
#include "common.h"

__global__ void check_positive(int x)
{
    assert(x > 0);
}

int main()
{
    check_positive<<<1, 1>>>(1);
    printf("passing assert: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    check_positive<<<1, 2>>>(-1);
    cudaError_t e = cudaDeviceSynchronize();
    printf("failing assert: %s\n", cudaGetErrorName(e));
    void *p;
    printf("next call: %s\n", cudaGetErrorName(cudaMalloc(&p, 16)));
    printf(e == cudaErrorAssert ? "PASS\n" : "FAIL\n");
    return e == cudaErrorAssert ? 0 : 1;
}
