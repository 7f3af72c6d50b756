// Several streams: pinned memory (cudaMallocHost and cudaHostRegister), async copies, a kernel
// per stream, events with elapsed times, and a cross-stream wait.
#include <vector>
#include "common.h"

__global__ void scale(float *x, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= s;
}

int main()
{
    const int nstreams = 4, n = 1 << 18;
    cudaStream_t st[nstreams];
    cudaEvent_t start[nstreams], stop[nstreams];
    float *host[nstreams], *dev[nstreams];
    std::vector<float> plain(n);
    int bad = 0, timed = 0;

    CHECK(cudaHostRegister(plain.data(), n * sizeof(float), cudaHostRegisterDefault));
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&start[s]));
        CHECK(cudaEventCreate(&stop[s]));
        CHECK(cudaMallocHost(&host[s], n * sizeof(float)));
        CHECK(cudaMalloc(&dev[s], n * sizeof(float)));
        for (int i = 0; i < n; i++)
            host[s][i] = (float)(i % 1000) + s;
    }
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaEventRecord(start[s], st[s]));
        CHECK(cudaMemcpyAsync(dev[s], host[s], n * sizeof(float), cudaMemcpyHostToDevice, st[s]));
        scale<<<(n + 255) / 256, 256, 0, st[s]>>>(dev[s], (float)(s + 2), n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(host[s], dev[s], n * sizeof(float), cudaMemcpyDeviceToHost, st[s]));
        CHECK(cudaEventRecord(stop[s], st[s]));
    }
    // Stream 0 waits for stream 3's work, then copies stream 3's result into registered memory.
    CHECK(cudaStreamWaitEvent(st[0], stop[nstreams - 1], 0));
    CHECK(cudaMemcpyAsync(plain.data(), dev[nstreams - 1], n * sizeof(float),
                          cudaMemcpyDeviceToHost, st[0]));
    for (int s = 0; s < nstreams; s++) {
        float ms = -1;
        CHECK(cudaStreamSynchronize(st[s]));
        CHECK(cudaEventElapsedTime(&ms, start[s], stop[s]));
        timed += ms > 0;
        for (int i = 0; i < n; i++)
            bad += host[s][i] != ((float)(i % 1000) + s) * (s + 2);
    }
    for (int i = 0; i < n; i++)
        bad += plain[i] != ((float)(i % 1000) + nstreams - 1) * (nstreams + 1);
    printf("streams: %d streams x %d floats, %d mismatches\n", nstreams, n, bad);
    printf("elapsed times positive: %d of %d\n", timed, nstreams);
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaEventDestroy(start[s]));
        CHECK(cudaEventDestroy(stop[s]));
        CHECK(cudaStreamDestroy(st[s]));
        CHECK(cudaFreeHost(host[s]));
        CHECK(cudaFree(dev[s]));
    }
    CHECK(cudaHostUnregister(plain.data()));
    printf(bad == 0 && timed == nstreams ? "PASS\n" : "FAIL\n");
    return bad != 0 || timed != nstreams;
}
