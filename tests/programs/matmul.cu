// Tiled matrix multiply with shared memory, checked against a CPU result.
#include <cmath>
#include <vector>
#include "common.h"

#define TILE 16

__global__ void matmul(const float *A, const float *B, float *C, int n)
{
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0;

    for (int t = 0; t < n / TILE; t++) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = sum;
}

int main()
{
    const int n = 256;
    std::vector<float> A(n * n), B(n * n), C(n * n), ref(n * n);
    float *dA, *dB, *dC, maxerr = 0;

    for (int i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7) % 13) / 13.0f;
        B[i] = (float)((i * 5) % 11) / 11.0f;
    }
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            double s = 0;
            for (int k = 0; k < n; k++)
                s += (double)A[r * n + k] * B[k * n + c];
            ref[r * n + c] = (float)s;
        }
    CHECK(cudaMalloc(&dA, n * n * sizeof(float)));
    CHECK(cudaMalloc(&dB, n * n * sizeof(float)));
    CHECK(cudaMalloc(&dC, n * n * sizeof(float)));
    CHECK(cudaMemcpy(dA, A.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    matmul<<<dim3(n / TILE, n / TILE), dim3(TILE, TILE)>>>(dA, dB, dC, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(C.data(), dC, n * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n * n; i++)
        maxerr = fmaxf(maxerr, fabsf(C[i] - ref[i]));
    printf("matmul %dx%d tile %d: max error vs CPU %s 1e-3\n", n, n, TILE,
           maxerr < 1e-3f ? "<" : ">=");
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    printf(maxerr < 1e-3f ? "PASS\n" : "FAIL\n");
    return maxerr >= 1e-3f;
}
