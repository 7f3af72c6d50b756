// cuBLAS SGEMM through the driver rgpu provides; built by tests/gpu/bundle.sh (needs libcublas).
#include <cstdio>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

int main()
{
    const int n = 1024;
    std::vector<float> A(n * n), B(n * n), C(n * n);
    float *a, *b, *c, one = 1, zero = 0;
    cublasHandle_t h;
    double maxerr = 0;

    for (int i = 0; i < n * n; i++) {
        A[i] = (float)(i % 7) - 3;
        B[i] = (float)(i % 5) - 2;
    }
    cudaMalloc(&a, n * n * 4);
    cudaMalloc(&b, n * n * 4);
    cudaMalloc(&c, n * n * 4);
    cudaMemcpy(a, A.data(), n * n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, B.data(), n * n * 4, cudaMemcpyHostToDevice);
    printf("cublasCreate: %d\n", (int)cublasCreate(&h));
    printf("cublasSgemm: %d\n",
           (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
    printf("synchronize: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    cudaMemcpy(C.data(), c, n * n * 4, cudaMemcpyDeviceToHost);
    for (int col = 0; col < n; col += 97)
        for (int row = 0; row < n; row += 89) {
            double s = 0;
            for (int k = 0; k < n; k++)
                s += (double)A[k * n + row] * B[col * n + k];
            double e = s - C[col * n + row];
            maxerr = e > maxerr ? e : -e > maxerr ? -e : maxerr;
        }
    printf("sgemm %dx%d: sampled max error %s 1e-2\n", n, n, maxerr < 1e-2 ? "<" : ">=");
    cublasDestroy(h);
    printf(maxerr < 1e-2 ? "PASS\n" : "FAIL\n");
    return maxerr >= 1e-2;
}
