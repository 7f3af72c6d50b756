// CUDA graphs through stream capture: a memset and kernels captured once, instantiated, and
// launched several times; the result is checked.
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
    const int n = 1 << 16, launches = 5;
    std::vector<float> h(n, 1.0f), out(n);
    float *d, *acc;
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamCaptureStatus status;
    int bad = 0;

    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMalloc(&acc, n * sizeof(float)));
    CHECK(cudaMemcpy(acc, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamIsCapturing(s, &status));
    printf("capturing: %s\n", status == cudaStreamCaptureStatusActive ? "yes" : "no");
    CHECK(cudaMemsetAsync(d, 0, n * sizeof(float), s));
    scale<<<(n + 255) / 256, 256, 0, s>>>(acc, 2.0f, n);
    scale<<<(n + 255) / 256, 256, 0, s>>>(acc, 0.75f, n);
    CHECK(cudaMemcpyAsync(d, acc, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaStreamIsCapturing(s, &status));
    printf("capturing after end: %s\n", status == cudaStreamCaptureStatusActive ? "yes" : "no");
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < launches; i++)
        CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    float expect = 1.0f;
    for (int i = 0; i < launches; i++)
        expect *= 1.5f;
    for (int i = 0; i < n; i++)
        bad += out[i] != expect;
    printf("graph launched %d times: value %.4f, %d mismatches\n", launches, out[0], bad);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(s));
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
