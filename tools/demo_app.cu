// The program the README's demo runs through rgpu: a saxpy on whatever GPU the client reaches,
// printing what it computed and where it ran.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        if (err_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, cudaGetErrorName(err_),             \
                    cudaGetErrorString(err_));                                                 \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main()
{
    const int n = 1 << 20;
    std::vector<float> x(n), y(n);
    cudaDeviceProp prop;
    float *dx, *dy;
    double sum = 0;
    int count = 0;

    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 100);
        y[i] = 1.0f;
    }
    CHECK(cudaGetDeviceCount(&count));
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        sum += y[i];
    printf("saxpy of %d floats: sum = %.0f (expected %.0f)\n", n, sum, (double)n + 2.0 * 49.5 * n);
    printf("ran on: %s (compute capability %d.%d, %.1f GiB), %d device(s) visible\n", prop.name,
           prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0, count);
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    return sum == (double)n + 2.0 * 49.5 * n ? 0 : 1;
}
