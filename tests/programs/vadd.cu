// Vector add of 1M floats, plus cudaMemset and a __device__ symbol written and read back.
#include <vector>
#include "common.h"

__device__ int dev_counter;

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main()
{
    const int n = 1 << 20;
    std::vector<float> a(n), b(n), c(n);
    float *da, *db, *dc;
    int sym = 42, back = 0, bad = 0;
    cudaDeviceProp prop;

    for (int i = 0; i < n; i++) {
        a[i] = i * 0.5f;
        b[i] = 1000.0f - i;
    }
    CHECK(cudaGetDeviceProperties(&prop, 0));
    fprintf(stderr, "device: %s\n", prop.name);
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CHECK(cudaMemset(dc, 0xff, n * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        bad += c[i] != a[i] + b[i];
    CHECK(cudaMemcpyToSymbol(dev_counter, &sym, sizeof(sym)));
    CHECK(cudaMemcpyFromSymbol(&back, dev_counter, sizeof(back)));
    printf("vadd: %d elements, %d mismatches, c[12345] = %.1f\n", n, bad, c[12345]);
    printf("symbol round trip: %d\n", back);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    printf(bad == 0 && back == 42 ? "PASS\n" : "FAIL\n");
    return bad != 0 || back != 42;
}
