// cuBLAS GEMM loop, fp32 and fp16 (tensor cores), 4096^3: TFLOP/s. Prints JSON lines.
#include <cstdio>
#include <ctime>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

static double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void run(cublasHandle_t h, cudaDataType type, const char *name)
{
    const int n = 4096, iters = 50;
    size_t es = type == CUDA_R_16F ? 2 : 4;
    void *a, *b, *c;
    float one = 1, zero = 0;
    cublasComputeType_t compute = type == CUDA_R_16F ? CUBLAS_COMPUTE_32F_FAST_16F
                                                     : CUBLAS_COMPUTE_32F;

    cudaMalloc(&a, n * n * es);
    cudaMalloc(&b, n * n * es);
    cudaMalloc(&c, n * n * es);
    cudaMemset(a, 0, n * n * es);
    cudaMemset(b, 0, n * n * es);
    for (int i = 0; i < 3; i++)
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, type, n, b, type, n, &zero, c,
                     type, n, compute, CUBLAS_GEMM_DEFAULT);
    cudaDeviceSynchronize();
    double t = now_s();
    for (int i = 0; i < iters; i++)
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, type, n, b, type, n, &zero, c,
                     type, n, compute, CUBLAS_GEMM_DEFAULT);
    cudaError_t err = cudaDeviceSynchronize();
    double tflops = 2.0 * n * n * (double)n * iters / (now_s() - t) / 1e12;
    printf("{\"bench\": \"gemm_%s_4096\", \"value\": %.3f, \"unit\": \"TFLOP/s\"%s}\n", name,
           err == cudaSuccess ? tflops : 0.0, err == cudaSuccess ? "" : ", \"error\": true");
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

int main()

{
    cublasHandle_t h;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 1;
    run(h, CUDA_R_32F, "fp32");
    run(h, CUDA_R_16F, "fp16");
    cublasDestroy(h);
    return 0;
}
