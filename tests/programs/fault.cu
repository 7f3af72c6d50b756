// A kernel that writes far out of bounds: the error must be the one a local GPU reports.
#include "common.h"

__global__ void oob_write(int *p)
{
    p[(size_t)1 << 40] = 1;
}

int main()
{
    int *d;
    CHECK(cudaMalloc(&d, sizeof(int)));
    oob_write<<<1, 1>>>(d);
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    cudaError_t after = cudaMalloc(&d, sizeof(int));
    printf("launch: %s\n", cudaGetErrorName(launch));
    printf("synchronize: %s\n", cudaGetErrorName(sync));
    printf("next call: %s\n", cudaGetErrorName(after));
    bool ok = sync == cudaErrorIllegalAddress && after == cudaErrorIllegalAddress;
    printf(ok ? "PASS\n" : "FAIL\n");
    return !ok;
}
